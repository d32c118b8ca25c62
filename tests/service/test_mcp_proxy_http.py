"""`reflection mcp-proxy` over streamable HTTP, on 127.0.0.1, as real processes driven by the MCP
SDK's client: in front of a remote server (`--url`), serving HTTP clients (`--listen`), and both;
with the same checks, notes and pass-through as over stdio."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

pytestmark = pytest.mark.slow  # real processes and servers

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters

SERVER = Path(__file__).with_name("_mcp_weather_server.py")
CLI = "from reflection.cli import app; app()"
NOTE = 'reflection: the call was corrected before it ran: "days": "3" → 3'


def _env(calls_log: Path) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("REFLECTION_")} | {"CALLS_LOG": str(calls_log)}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_listening(port: int, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"exited with {process.returncode} before listening"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listening on port {port} after {timeout} s")


@contextlib.contextmanager
def _running(argv: list[str], port: int, env: dict[str, str], stop: int = signal.SIGTERM) -> Iterator[subprocess.Popen]:
    """A process listening on `port` for the block's duration, then stopped with `stop`."""
    process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_listening(port, process)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(stop)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def _weather_over_http(calls_log: Path) -> Iterator[str]:
    port = _free_port()
    with _running([sys.executable, str(SERVER), "--http", str(port)], port, _env(calls_log)):
        yield f"http://127.0.0.1:{port}/mcp"


def _proxy(*args: str) -> list[str]:
    return [sys.executable, "-c", CLI, "mcp-proxy", *args]


def _session(server: StdioServerParameters | str) -> list:
    """The same steps as over stdio: list, a valid call, a fixable one, a refused one, a resource."""

    async def steps() -> list:
        with anyio.fail_after(60):
            async with Client(server) as client:
                return [
                    sorted(t.name for t in (await client.list_tools()).tools),
                    await client.call_tool("get_weather", {"city": "Paris", "days": 2}),
                    await client.call_tool("get_weather", {"city": "Oslo", "days": "3"}),
                    await client.call_tool("delete_account", {"account_id": "42"}),
                    (await client.read_resource("notes://today")).contents[0].text,
                ]

    return anyio.run(steps)


def _assert_checked(outcome: list, calls_log: Path) -> None:
    names, ok, fixed, refused, text = outcome
    assert names == ["delete_account", "get_weather"]
    assert ok.is_error is False and [c.text for c in ok.content] == ["Paris: sunny for 2 day(s)"]
    assert fixed.is_error is False and [c.text for c in fixed.content] == ["Oslo: sunny for 3 day(s)", NOTE]
    assert refused.is_error is True and "missing_required_parameter" in refused.content[0].text
    assert text == "bring an umbrella"
    executed = [json.loads(line) for line in calls_log.read_text().splitlines()]
    assert executed == [
        {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}},
        {"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}},
    ]


def test_a_stdio_client_reaches_a_remote_server_over_http_through_the_checks(tmp_path):
    calls_log = tmp_path / "calls.jsonl"
    with _weather_over_http(calls_log) as url:
        argv = _proxy("--url", url)
        outcome = _session(StdioServerParameters(command=argv[0], args=argv[1:], env=_env(calls_log)))
    _assert_checked(outcome, calls_log)


def test_http_clients_reach_a_stdio_server_through_the_checks(tmp_path):
    calls_log = tmp_path / "calls.jsonl"
    port = _free_port()
    with _running(
        _proxy("--listen", f"127.0.0.1:{port}", "--", sys.executable, str(SERVER)), port, _env(calls_log)
    ) as proxy:
        outcome = _session(f"http://127.0.0.1:{port}/mcp")
    assert proxy.returncode == 128 + signal.SIGTERM
    _assert_checked(outcome, calls_log)


def test_http_clients_reach_a_remote_http_server_through_the_checks(tmp_path):
    calls_log = tmp_path / "calls.jsonl"
    port = _free_port()
    with (
        _weather_over_http(calls_log) as url,
        _running(_proxy("--listen", f"127.0.0.1:{port}", "--url", url), port, _env(calls_log), signal.SIGINT) as proxy,
    ):
        outcome = _session(f"http://127.0.0.1:{port}/mcp")
    assert proxy.returncode == 128 + signal.SIGINT
    _assert_checked(outcome, calls_log)


def test_only_an_initialize_from_a_local_page_opens_a_session_and_starts_a_server(tmp_path):
    pid_file = tmp_path / "server.pid"
    port = _free_port()
    argv = _proxy(
        "--listen",
        f"127.0.0.1:{port}",
        "--",
        sys.executable,
        "-m",
        "reflection.testing.hostile_mcp",
        "--lifetime",
        "60",
        "--calls-log",
        str(tmp_path / "calls.jsonl"),
        "--pid-file",
        str(pid_file),
    )
    accept = {"accept": "application/json, text/event-stream"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}},
    }
    with _running(argv, port, _env(tmp_path / "unused.jsonl")):
        url = f"http://127.0.0.1:{port}/mcp"
        not_initialize = httpx.post(
            url,
            timeout=30,
            headers=accept,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "?"}},
            },
        )
        # A web page on another host that resolves to 127.0.0.1 (DNS rebinding), and one that says where it is from.
        rebound = httpx.post(url, timeout=30, headers=accept | {"host": f"evil.example:{port}"}, json=initialize)
        cross_origin = httpx.post(url, timeout=30, headers=accept | {"origin": "https://evil.example"}, json=initialize)
    assert not_initialize.status_code == 400
    assert not_initialize.json()["error"]["message"] == "Bad Request: a session starts with an initialize request"
    assert (rebound.status_code, cross_origin.status_code) == (421, 403)
    assert not pid_file.exists() and not (tmp_path / "calls.jsonl").exists()


def test_listen_refuses_an_address_beyond_loopback(tmp_path):
    done = subprocess.run(
        _proxy("--listen", "0.0.0.0:8931", "--", sys.executable, str(SERVER)),
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert "no authentication" in done.stderr and "refusing 0.0.0.0" in done.stderr
