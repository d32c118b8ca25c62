"""`reflection mcp-proxy` in front of a small MCP server (tests/_mcp_weather_server.py), driven by the
MCP SDK's own client over stdio: schemas learned from tools/list, tools/call checked, refusals as
MCP tool errors with the feedback, everything else passed through."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest

mcp = pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

pytestmark = pytest.mark.slow  # processes, servers or subprocess CLI runs: `pytest -m "not slow"` leaves them out

SERVER = Path(__file__).with_name("_mcp_weather_server.py")
CLI = "from reflection.cli import app; app()"


def _proxied(calls_log: Path, *extra: str) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFLECTION_")} | {"CALLS_LOG": str(calls_log)}
    return StdioServerParameters(command=sys.executable,
                                 args=["-c", CLI, "mcp-proxy", *extra, "--", sys.executable, str(SERVER)], env=env)


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
    assert bad.is_error is True
    assert "missing_required_parameter" in bad.content[0].text and "confirm" in bad.content[0].text
    assert text == "bring an umbrella"
    assert _executed(log) == [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}},
                              {"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}]


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

    done = subprocess.run([sys.executable, "-c", CLI, "mcp-proxy", "--", str(tmp_path / "no-such-server")],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert "cannot start the MCP server" in done.stderr
