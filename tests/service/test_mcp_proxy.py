"""`reflection mcp-proxy` in front of a small MCP server (tests/service/_mcp_weather_server.py), driven by the
MCP SDK's own client over stdio: schemas learned from tools/list, tools/call checked, refusals as
MCP tool errors with the feedback, corrections run with a note, everything else passed through.
The hostile cases are in test_mcp_proxy_hostile.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest

mcp = pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters

pytestmark = pytest.mark.slow  # processes, servers or subprocess CLI runs: `pytest -m "not slow"` leaves them out

SERVER = Path(__file__).with_name("_mcp_weather_server.py")
CLI = "from reflection.cli import app; app()"


def _proxied(calls_log: Path, *extra: str) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFLECTION_")} | {"CALLS_LOG": str(calls_log)}
    return StdioServerParameters(
        command=sys.executable, args=["-c", CLI, "mcp-proxy", *extra, "--", sys.executable, str(SERVER)], env=env
    )


def _executed(calls_log: Path) -> list[dict]:
    return [json.loads(line) for line in calls_log.read_text().splitlines()] if calls_log.exists() else []


async def _session(params: StdioServerParameters, steps) -> list:
    with anyio.fail_after(60):
        async with Client(params) as client:
            return [await step(client) for step in steps]


def test_a_listed_session_passes_through_runs_valid_calls_corrects_fixable_ones_and_refuses_bad_ones(tmp_path):
    log = tmp_path / "calls.jsonl"

    async def list_tools(client):
        return sorted(t.name for t in (await client.list_tools()).tools)

    async def valid(client):
        return await client.call_tool("get_weather", {"city": "Paris", "days": 2})

    async def fixable(client):
        return await client.call_tool("get_weather", {"city": "Oslo", "days": "3"})

    async def refused(client):
        return await client.call_tool("delete_account", {"account_id": "42"})

    async def resource(client):
        return (await client.read_resource("notes://today")).contents[0].text

    names, ok, fixed, bad, text = anyio.run(_session, _proxied(log), [list_tools, valid, fixable, refused, resource])
    assert names == ["delete_account", "get_weather"]
    assert ok.is_error is False and ok.content[0].text == "Paris: sunny for 2 day(s)"
    assert fixed.is_error is False and fixed.content[0].text == "Oslo: sunny for 3 day(s)"
    # The correction ran, and the client is told so: a last text block, quoted values.
    assert fixed.content[-1].text == 'reflection: the call was corrected before it ran: "days": "3" → 3'
    assert bad.is_error is True
    assert "missing_required_parameter" in bad.content[0].text and "confirm" in bad.content[0].text
    assert text == "bring an umbrella"
    assert _executed(log) == [
        {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}},
        {"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}},
    ]


def test_a_call_before_any_listing_is_checked_against_the_tools_the_proxy_lists_itself(tmp_path):
    log = tmp_path / "calls.jsonl"

    async def unlisted_first(client):
        return await client.call_tool("get_weather", {"town": "Paris"})

    (refused,) = anyio.run(_session, _proxied(log), [unlisted_first])
    assert refused.is_error is True
    assert "non_existent_parameter" in refused.content[0].text and "town" in refused.content[0].text
    assert _executed(log) == []


def test_a_missing_server_command_is_a_clear_error(tmp_path):
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", CLI, "mcp-proxy", "--", str(tmp_path / "no-such-server")],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 2
    assert "cannot start the MCP server" in done.stderr


def test_the_tool_list_is_prepared_once_per_content_and_calls_are_checked_without_a_conversation():
    """In process, with memory streams for both sides: the gate gets the same prepared tool
    inventory for every call until a tools/list answer changes the tools (with 100,000 tools,
    preparing them took ~0.3 s of CPU per call), and no history (the proxy sees none)."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    from reflection.gate import Gate
    from reflection.service.mcp_proxy import McpProxy

    def tool(name: str, kind: str) -> dict:
        return {"name": name, "inputSchema": {"type": "object", "properties": {"x": {"type": kind}}}}

    listings = [[tool("a", "integer")], [tool("a", "integer")], [tool("a", "string")]]
    seen: list[tuple] = []

    class RecordingGate(Gate):
        async def check(self, call, tools, history=None):
            seen.append((tools, history))
            return await super().check(call, tools, history)

    def message(data: dict) -> SessionMessage:
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(data))

    async def main() -> list:
        to_proxy, client_read = anyio.create_memory_object_stream(10)
        client_write, from_proxy = anyio.create_memory_object_stream(10)
        server_send, server_read = anyio.create_memory_object_stream(10)
        server_write, server_inbox = anyio.create_memory_object_stream(10)

        async def server() -> None:
            async for item in server_inbox:
                m = item.message
                result = {"tools": listings.pop(0)} if m.method == "tools/list" else {"content": []}
                await server_send.send(message({"jsonrpc": "2.0", "id": m.id, "result": result}))

        async def ask(id_: int, method: str, params: dict | None = None) -> dict:
            await to_proxy.send(message({"jsonrpc": "2.0", "id": id_, "method": method, "params": params or {}}))
            return (await from_proxy.receive()).message.model_dump(by_alias=True, exclude_unset=True)

        async with RecordingGate() as gate, anyio.create_task_group() as tg:
            tg.start_soon(server)
            tg.start_soon(McpProxy(gate, client_read, client_write, server_read, server_write).run)
            with anyio.fail_after(30):
                await ask(1, "tools/list")
                answers = [
                    await ask(2, "tools/call", {"name": "a", "arguments": {"x": 1}}),
                    await ask(3, "tools/call", {"name": "a", "arguments": {"x": 2}}),
                ]
                await ask(4, "tools/list")  # the same tools again
                answers.append(await ask(5, "tools/call", {"name": "a", "arguments": {"x": 3}}))
                await ask(6, "tools/list")  # x is now a string
                answers.append(await ask(7, "tools/call", {"name": "a", "arguments": {"x": "4"}}))
            tg.cancel_scope.cancel()
        return answers

    answers = anyio.run(main)
    assert [a["result"] for a in answers] == [{"content": []}] * 4
    first, second, same, changed = (tools for tools, _ in seen)
    assert first is second is same
    assert changed is not first
    assert [history for _, history in seen] == [None] * 4


def test_a_call_the_client_cancels_while_it_is_checked_is_never_sent():
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    from reflection.gate import Gate
    from reflection.service.mcp_proxy import McpProxy

    release = anyio.Event()

    class SlowGate(Gate):
        async def check(self, call, tools, history=None):
            await release.wait()
            return await super().check(call, tools, history)

    def message(data: dict) -> SessionMessage:
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(data))

    async def main() -> list:
        to_proxy, client_read = anyio.create_memory_object_stream(10)
        client_write, from_proxy = anyio.create_memory_object_stream(10)
        server_send, server_read = anyio.create_memory_object_stream(10)
        server_write, server_inbox = anyio.create_memory_object_stream(10)
        received = []

        async def server() -> None:
            async for item in server_inbox:
                m = item.message
                received.append(m.method)
                if m.method == "tools/list":
                    await server_send.send(
                        message(
                            {
                                "jsonrpc": "2.0",
                                "id": m.id,
                                "result": {
                                    "tools": [{"name": "a", "inputSchema": {"type": "object", "properties": {}}}]
                                },
                            }
                        )
                    )
                elif m.method == "ping":
                    await server_send.send(message({"jsonrpc": "2.0", "id": m.id, "result": {}}))

        async with SlowGate() as gate, anyio.create_task_group() as tg:
            tg.start_soon(server)
            tg.start_soon(McpProxy(gate, client_read, client_write, server_read, server_write).run)
            with anyio.fail_after(30):
                await to_proxy.send(
                    message({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a"}})
                )
                await to_proxy.send(
                    message({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
                )
                while "notifications/cancelled" not in received:
                    await anyio.sleep(0.01)
                release.set()
                await to_proxy.send(message({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
                answer = (await from_proxy.receive()).message
            tg.cancel_scope.cancel()
        return [answer.id, received]

    answered, received = anyio.run(main)
    assert answered == 2  # the ping; the cancelled call got no answer, as MCP asks
    assert sorted(received) == ["notifications/cancelled", "ping", "tools/list"]  # no tools/call


def test_a_line_longer_than_the_limit_is_one_unreadable_message_and_the_next_line_is_read():
    from reflection.service.mcp_proxy import LineSplitter, UnreadableMessage

    lines = LineSplitter(limit=100)
    ping = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n'
    out = lines.feed(b"x" * 80) + lines.feed(b"y" * 80) + lines.feed(b"z" * 500 + b"\n" + ping)
    assert [type(item).__name__ for item in out] == ["UnreadableMessage", "SessionMessage"]
    assert isinstance(out[0], UnreadableMessage) and out[0].reason == "longer than 100 bytes"
    assert out[1].message.method == "ping"
