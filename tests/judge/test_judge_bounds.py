"""The judge's bounds against real misbehaving servers on 127.0.0.1 (separate processes):
a server trickling its reply, one sending a huge body, and an address where nothing listens."""

import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest

from reflection import JudgeFatalError
from reflection.judge import Judge, JudgeConfig, JudgeError

MESSAGES = [{"role": "system", "content": "judge"}, {"role": "user", "content": "rate it"}]
SCHEMA = {
    "type": "object",
    "properties": {"explanation": {"type": "string"}, "score": {"type": "integer"}},
    "required": ["explanation", "score"],
    "additionalProperties": False,
}


def served(*args):
    """A stand-in server process (`python -m reflection.testing.server ...`) and its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "reflection.testing.server", "--idle-timeout", "30", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    return process, process.stdout.readline().strip()


@pytest.fixture
def server_process():
    started = []

    def start(*args):
        process, url = served(*args)
        started.append(process)
        assert url.startswith("http://127.0.0.1:"), url
        return url

    yield start
    for process in started:
        process.terminate()
        process.wait(10)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def ask(config):
    async with Judge(config) as judge:
        return await judge.ask(MESSAGES, schema=SCHEMA, schema_name="score", validate=lambda data: data)


@pytest.mark.slow
@pytest.mark.parametrize("deadline", ["asyncio.timeout", "anyio.fail_after"])
async def test_a_server_trickling_its_reply_times_out_at_the_overall_deadline(server_process, monkeypatch, deadline):
    # One byte every 0.2 s: every read is quick, so only a deadline on the whole exchange ends it
    # (the server hangs up after 30 s; without a deadline that is a connection error, not a timeout).
    if deadline == "anyio.fail_after":  # the path taken under event loops other than asyncio
        monkeypatch.setattr("reflection.judge.client.sniffio", SimpleNamespace(current_async_library=lambda: "trio"))
    url = server_process("--transport-fault", "trickle")
    config = JudgeConfig(base_url=url, model="stand-in", timeout=1.5, max_attempts=1)
    with pytest.raises(JudgeError, match="the judge request timed out"):
        await ask(config)


async def test_a_huge_response_is_cut_off_at_max_response_bytes(server_process):
    url = server_process("--transport-fault", "huge")
    config = JudgeConfig(base_url=url, model="stand-in", max_response_bytes=1024 * 1024, max_attempts=2)
    with pytest.raises(JudgeError, match=r"exceeded max_response_bytes \(1,048,576 bytes\) \(after 1 request\(s\)\)"):
        await ask(config)


async def test_a_refused_connection_is_fatal_at_once():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(JudgeFatalError, match=rf"^judge {url}/chat/completions: connection refused") as info:
        await ask(JudgeConfig(base_url=url, model="m", max_attempts=4, retry_max_wait=0))
    assert info.value.status is None


async def test_a_server_answering_401_is_fatal(server_process, monkeypatch):
    monkeypatch.setenv("MY_JUDGE_KEY", "sk-from-the-environment")
    url = server_process("--transport-fault", "status", "--status", "401")
    with pytest.raises(JudgeFatalError) as info:
        await ask(JudgeConfig(base_url=url, model="stand-in", api_key_env="MY_JUDGE_KEY"))
    assert str(info.value) == (
        f"judge {url}/chat/completions: HTTP 401: Incorrect API key provided "
        "(API key from the environment variable MY_JUDGE_KEY)"
    )
