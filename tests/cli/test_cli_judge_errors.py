"""Fatal judge errors through the real CLI: `check`, `batch` and `score` stop at the first 401,
403, 404 or refused connection with exit 2 and one line naming the URL, the status and the
server's message; warnings (no key for a remote endpoint) are one plain line on stderr."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import respx
from typer.testing import CliRunner

from reflection.batch._synthetic import synthetic_rows, write_jsonl
from reflection.cli import app
from reflection.testing.server import FaultyStandInJudge

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.fixture
def source(tmp_path):
    return write_jsonl(tmp_path / "in.jsonl", synthetic_rows(40))


def command(name, source, tmp_path, url):
    if name == "check":
        return ["check", str(source), "-o", str(tmp_path / "out.jsonl"), "--base-url", url, "--model", "m"]
    if name == "batch":
        return [
            "batch",
            str(source),
            "-o",
            str(tmp_path / "out.jsonl"),
            "--base-url",
            url,
            "--model",
            "m",
            "--no-progress",
        ]
    return [
        "score",
        str(EXAMPLES / "scoring/predictions.jsonl"),
        "--references",
        str(EXAMPLES / "scoring/references.jsonl"),
        "-o",
        str(tmp_path / "out.jsonl"),
        "--base-url",
        url,
        "--model",
        "m",
    ]


@pytest.mark.parametrize("name", ["check", "batch", "score"])
@pytest.mark.parametrize(
    ("status", "message"), [(401, "Incorrect API key provided"), (404, "The model does not exist")]
)
def test_a_fatal_http_status_stops_the_command_with_one_error_line(
    tmp_path, source, name, status, message, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    with FaultyStandInJudge(transport_fault="status", status=status, idle_timeout=30) as server:
        result = runner.invoke(app, command(name, source, tmp_path, server.base_url))
        requests = server.requests
    assert result.exit_code == 2, result.output
    key = (
        " (API key from the environment variable OPENAI_API_KEY)" if status == 401 else ""
    )  # where a rejected key came from
    assert error_lines(result.stderr) == [
        f"error: judge {server.base_url}/chat/completions: HTTP {status}: {message}{key}"
    ]
    assert "Traceback" not in result.stderr
    assert requests <= 32  # stopped at the first error: never one request per row of the 40
    if name != "score":
        assert "rows:" not in result.stderr  # no summary of a run that did not happen


@pytest.mark.parametrize("name", ["check", "batch", "score"])
def test_a_refused_connection_stops_the_command(tmp_path, source, name):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    result = runner.invoke(app, command(name, source, tmp_path, url))
    assert result.exit_code == 2, result.output
    [line] = error_lines(result.stderr)
    assert line.startswith(f"error: judge {url}/chat/completions: connection refused")


@pytest.mark.slow
def test_a_403_stops_the_real_cli_process(tmp_path, source):
    # The command and the server each in their own process: exit status and stderr as a shell sees them.
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reflection.testing.server",
            "--idle-timeout",
            "30",
            "--transport-fault",
            "status",
            "--status",
            "403",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = server.stdout.readline().strip()
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
        done = subprocess.run(
            [sys.executable, "-c", "from reflection.cli import app; app()", *command("batch", source, tmp_path, url)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    finally:
        server.terminate()
        server.wait(10)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: judge {url}/chat/completions: HTTP 403: You are not allowed to use this model "
        "(no API key: the environment variable OPENAI_API_KEY is not set)"
    ]


def test_a_remote_endpoint_without_a_key_gets_one_warning_before_the_401(tmp_path, source):
    url = "https://judge.example.com/v1"
    with respx.mock(base_url=url) as mock:
        mock.post("/chat/completions").mock(return_value=httpx.Response(401, json={"error": {"message": "no key"}}))
        result = runner.invoke(app, command("check", source, tmp_path, url))
    assert result.exit_code == 2
    assert [line for line in result.stderr.splitlines() if line.startswith(("warning:", "error:"))] == [
        f"warning: judge {url}/chat/completions: no API key is set (judge.api_key is unset and $OPENAI_API_KEY is "
        "empty) for a remote endpoint; its requests will likely be refused with HTTP 401",
        f"error: judge {url}/chat/completions: HTTP 401: no key "
        "(no API key: the environment variable OPENAI_API_KEY is not set)",
    ]
