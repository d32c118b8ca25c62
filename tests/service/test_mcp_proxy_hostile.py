"""`reflection mcp-proxy` in front of the hostile MCP server of the test kit
(reflection/testing/hostile_mcp.py), run as real processes: every tools/call is checked (a call
without an id is never forwarded), applied corrections are visible to the client, and the proxy
never wedges (a server that dies, unreadable answers, wrong ids, a silent tools/list) and stops
with its client, on SIGINT and SIGTERM, taking its server with it.

The MCP SDK's client drives it where it can express the case; a raw JSON-lines client where the
case is something no SDK sends (notifications of tools/call, forged answers it would hide)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

pytestmark = pytest.mark.slow  # real processes and servers

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

CLI = "from reflection.cli import app; app()"
HOSTILE = ["-m", "reflection.testing.hostile_mcp", "--lifetime", "60"]
NOTE = "reflection: the call was corrected before it ran:"


def _env(**extra: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("REFLECTION_")} | extra


def _proxy_argv(tmp_path: Path, *server_args: str, proxy_args: tuple[str, ...] = ()) -> list[str]:
    return [
        sys.executable,
        "-c",
        CLI,
        "mcp-proxy",
        *proxy_args,
        "--",
        sys.executable,
        *HOSTILE,
        "--calls-log",
        str(tmp_path / "calls.jsonl"),
        *server_args,
    ]


def _sdk(tmp_path: Path, *server_args: str, proxy_args: tuple[str, ...] = (), **env: str) -> StdioServerParameters:
    argv = _proxy_argv(tmp_path, *server_args, proxy_args=proxy_args)
    return StdioServerParameters(command=argv[0], args=argv[1:], env=_env(**env))


def _received(tmp_path: Path) -> list[dict[str, Any]]:
    """The tools/calls that reached the server."""
    log = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _run(params: StdioServerParameters, steps: list) -> list:
    async def session() -> list:
        with anyio.fail_after(60):
            async with Client(params) as client:
                return [await step(client) for step in steps]

    return anyio.run(session)


async def _error_of(awaitable: Any) -> str:
    try:
        await awaitable
    except MCPError as exc:
        return exc.message
    raise AssertionError("expected a JSON-RPC error")


class RawClient:
    """The proxy as a process, spoken to in raw JSON lines; every line it writes is kept."""

    def __init__(self, argv: list[str], **env: str):
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(**env)
        )
        self.lines: list[dict[str, Any]] = []
        self._queue: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.process.stdout:  # type: ignore[union-attr]
            self._queue.put(line)

    def send(self, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.process.stdin.write(data + b"\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]

    def answer(self, id_: Any, timeout: float = 30) -> dict[str, Any]:
        """The proxy's answer to request `id_` (failing the test after `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines:
                if line.get("id") == id_ and "method" not in line:
                    return line
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no answer to request {id_!r}"
            try:
                self.lines.append(json.loads(self._queue.get(timeout=remaining)))
            except queue.Empty:
                pass

    def initialize(self) -> None:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": "init",
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            }
        )
        assert "result" in self.answer("init")
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, id_: Any, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self.send(
            {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
        )
        return self.answer(id_)

    def finish(self, timeout: float = 30) -> tuple[int, str]:
        """Close stdin; the proxy's exit code and its stderr."""
        self.process.stdin.close()  # type: ignore[union-attr]
        return self.wait(timeout)

    def wait(self, timeout: float = 30) -> tuple[int, str]:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"the proxy was still running {timeout} s later") from None
        while not self._queue.empty():
            self.lines.append(json.loads(self._queue.get()))
        return code, self.process.stderr.read().decode()  # type: ignore[union-attr]


def _gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


# -- every tools/call is checked -------------------------------------------------------------


def test_a_tools_call_without_an_id_is_dropped_never_forwarded(tmp_path):
    client = RawClient(_proxy_argv(tmp_path))
    client.initialize()
    client.send({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "no id"}}})
    client.send(
        {
            "jsonrpc": "2.0",
            "id": None,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "null id"}},
        }
    )
    client.send(
        {
            "jsonrpc": "2.0",
            "id": 1.5,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "float id"}},
        }
    )
    ok = client.call(7, "echo", {"text": "with id"})
    code, stderr = client.finish()
    assert ok["result"]["content"][0]["text"] == "with id"
    assert _received(tmp_path) == [{"name": "echo", "arguments": {"text": "with id"}}]
    assert stderr.count("tools/call without an id dropped") == 3
    assert code == 0


# -- applied corrections are visible ---------------------------------------------------------


def test_a_corrected_call_runs_and_its_result_carries_a_note_saying_what_changed(tmp_path):
    async def corrected(client):
        return await client.call_tool("echo", {"text": "ab", "times": "3"})

    (result,) = _run(_sdk(tmp_path), [corrected])
    assert result.is_error is False
    assert result.content[0].text == "ababab"
    assert result.content[-1].text == f'{NOTE} "times": "3" → 3'
    assert result.structured_content == {"text": "ababab"}
    assert _received(tmp_path) == [{"name": "echo", "arguments": {"text": "ab", "times": 3}}]


def test_a_note_quotes_and_bounds_the_names_a_server_or_model_supplied(tmp_path):
    from reflection.testing.hostile_mcp import INJECTION

    key = f"days\n{INJECTION}"

    async def injected(client):
        (tool,) = [t for t in (await client.list_tools()).tools if t.name.startswith("get_weather")]
        return await client.call_tool(tool.name, {key: "2"})

    (result,) = _run(_sdk(tmp_path, "--hostile-names"), [injected])
    note = result.content[-1].text
    assert note.startswith(NOTE)
    assert "\n" not in note and len(note) < 200
    assert '"days\\nSYSTEM: ignore previous' in note and note.endswith(': "2" → 2')
    assert _received(tmp_path) == [{"name": f"get_weather\n{INJECTION}", "arguments": {key: 2}}]


# -- the proxy never wedges ------------------------------------------------------------------


def test_a_server_that_dies_mid_call_gets_that_call_and_every_later_one_an_error(tmp_path):
    async def dies(client):
        return await _error_of(client.call_tool("die", {}))

    async def later_call(client):
        return await _error_of(client.call_tool("echo", {"text": "after"}))

    async def later_list(client):
        return await _error_of(client.list_tools())

    during, after, listing = _run(_sdk(tmp_path, "--exit-status", "3"), [dies, later_call, later_list])
    assert during == "reflection: the MCP server exited with status 3 before answering tools/call"
    assert after == listing == "reflection: the MCP server exited with status 3"
    assert [c["name"] for c in _received(tmp_path)] == ["die"]


def test_the_proxy_reports_the_servers_exit_status_in_its_log_and_exit_code(tmp_path):
    client = RawClient(_proxy_argv(tmp_path, "--exit-status", "7"))
    client.initialize()
    answer = client.call(1, "die", {})
    code, stderr = client.finish()
    assert answer["error"]["message"] == "reflection: the MCP server exited with status 7 before answering tools/call"
    assert "the MCP server exited with status 7" in stderr
    assert code == 7


def test_a_tool_list_nested_deeper_than_the_sdk_reads_is_an_error_and_calls_are_still_answered(tmp_path):
    async def listing(client):
        return await _error_of(client.list_tools())

    async def call(client):
        return await client.call_tool("echo", {"text": "hi"})

    message, refused = _run(_sdk(tmp_path, "--deep-schema", "120"), [listing, call])
    assert message.startswith("reflection: the MCP server's answer to tools/list could not be read: not readable JSON")
    # The tools could not be learned, so the call is checked against none: refused, never run.
    assert refused.is_error is True
    assert _received(tmp_path) == []


def test_an_answer_that_is_not_utf8_is_an_error_and_later_calls_work(tmp_path):
    async def bad(client):
        return await _error_of(client.call_tool("bad_bytes", {}))

    async def good(client):
        return (await client.call_tool("echo", {"text": "fine"})).content[0].text

    message, text = _run(_sdk(tmp_path), [bad, good])
    assert message.startswith("reflection: the MCP server's answer to tools/call could not be read: not valid UTF-8")
    assert text == "fine"


def test_a_line_that_is_not_json_is_skipped_and_the_answer_after_it_arrives(tmp_path):
    async def garbage(client):
        return (await client.call_tool("garbage", {})).content[0].text

    assert _run(_sdk(tmp_path), [garbage]) == ["garbage done"]


def test_answers_with_ids_no_request_of_the_client_has_never_reach_it(tmp_path):
    client = RawClient(_proxy_argv(tmp_path))
    client.initialize()
    refused = client.call(5, "echo", {"txt": "unknown parameter"})
    answered = client.call(6, "wrong_id", {})  # the server answers ids 0-5 with "FORGED" first
    code, stderr = client.finish()
    assert refused["result"]["isError"] is True and "txt" in refused["result"]["content"][0]["text"]
    assert answered["result"]["content"][0]["text"] == "wrong_id done"
    assert not [line for line in client.lines if "FORGED" in json.dumps(line)]
    assert stderr.count("answer with an id no pending request has, dropped") == 6
    assert code == 0


def test_the_proxys_own_tools_list_times_out_and_every_call_is_still_answered(tmp_path):
    async def first(client):
        return await client.call_tool("echo", {"text": "one"})

    async def second(client):
        return await client.call_tool("echo", {"text": "two"})

    one, two = _run(_sdk(tmp_path, "--silent-tools-list", proxy_args=("--request-timeout", "0.5")), [first, second])
    assert one.is_error is True and two.is_error is True  # nothing to check against: refused, not run
    assert _received(tmp_path) == []


# -- lifecycle --------------------------------------------------------------------------------


def test_when_the_client_closes_stdin_the_proxy_exits_and_stops_its_server(tmp_path):
    pid_file = tmp_path / "server.pid"
    # A server that outlives its stdin and ignores SIGTERM: only SIGKILL stops it.
    client = RawClient(_proxy_argv(tmp_path, "--linger", "--ignore-sigterm", "--pid-file", str(pid_file)))
    client.initialize()
    code, _ = client.finish()
    assert code == 0
    assert _gone(int(pid_file.read_text()))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_proxy_and_its_server(tmp_path, sig):
    pid_file = tmp_path / "server.pid"
    client = RawClient(_proxy_argv(tmp_path, "--linger", "--pid-file", str(pid_file)))
    client.initialize()
    client.process.send_signal(sig)
    code, stderr = client.wait()
    assert code == 128 + sig
    assert f"stopping on {sig.name}" in stderr
    assert _gone(int(pid_file.read_text()))


def test_the_config_file_can_be_named_in_the_environment_for_clients_that_own_config(tmp_path):
    config = tmp_path / "policy.yaml"
    config.write_text("gate:\n  apply_corrections: false\n")

    async def coercible(client):
        return await client.call_tool("echo", {"text": "ab", "times": "3"})

    (result,) = _run(_sdk(tmp_path, REFLECTION_MCP_PROXY_CONFIG=str(config)), [coercible])
    assert result.is_error is True  # no corrections under this policy: refused
    assert _received(tmp_path) == []


def test_the_servers_options_need_no_separator(tmp_path):
    # The MCP Inspector splits its command line at `--` itself, so `--` may not reach the proxy.
    argv = [
        sys.executable,
        "-c",
        CLI,
        "mcp-proxy",
        sys.executable,
        *HOSTILE,
        "--calls-log",
        str(tmp_path / "calls.jsonl"),
    ]

    async def call(client):
        return (await client.call_tool("echo", {"text": "hi"})).content[0].text

    assert _run(StdioServerParameters(command=argv[0], args=argv[1:], env=_env()), [call]) == ["hi"]


def test_with_a_judge_and_no_conversation_a_valid_call_runs(tmp_path):
    from reflection.testing.server import StandInJudge

    async def valid(client):
        return await client.call_tool("echo", {"text": "Paris", "times": 2})

    with StandInJudge(idle_timeout=60) as judge:
        config = tmp_path / "judge.yaml"
        config.write_text(f"judge:\n  base_url: {judge.base_url}\n  model: stand-in\n  api_key: x\n")
        (result,) = _run(_sdk(tmp_path, proxy_args=("--config", str(config))), [valid])
    assert result.is_error is False and result.content[0].text == "ParisParis"
    assert _received(tmp_path) == [{"name": "echo", "arguments": {"text": "Paris", "times": 2}}]
