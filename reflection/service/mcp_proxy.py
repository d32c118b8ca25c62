"""`reflection mcp-proxy -- COMMAND ARGS...`: an MCP proxy over stdio that checks every tool call.

The proxy runs the MCP server COMMAND as a child process (with the official MCP SDK's stdio
transports on both sides) and relays JSON-RPC messages between it and the MCP client, unchanged,
in both directions: initialisation, notifications, resources, prompts, sampling, everything.
Two things are looked at on the way:

- `tools/list` answers: the tools' input schemas are learned from them (if a client calls a tool
  before listing, the proxy lists the tools itself first);
- `tools/call` requests: the call goes through the `Gate` (static checks, and the judge on the
  arguments when one is configured). `allow` forwards it; `modify` forwards the verified
  correction; any other action answers the client directly with an MCP tool error (`isError:
  true`) whose text is the feedback, and the server never sees the call.

Each decision is logged as one JSON line on stderr (tool and action; never the arguments).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Sequence
from typing import Any

import anyio
import mcp_types as types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from reflection.config import ReflectionConfig

__all__ = ["McpProxy", "run_proxy"]

log = logging.getLogger("reflection.service.mcp")


def _message(data: dict[str, Any]) -> SessionMessage:
    return SessionMessage(types.jsonrpc_message_adapter.validate_python(data))


class McpProxy:
    """Relays between an MCP client (`client_read`/`client_write`) and a server (`server_read`/`server_write`),
    gating `tools/call` with `gate`."""

    def __init__(self, gate: Any, client_read: Any, client_write: Any, server_read: Any, server_write: Any):
        self.gate = gate
        self.client_read, self.client_write = client_read, client_write
        self.server_read, self.server_write = server_read, server_write
        self.tools: dict[str, dict[str, Any]] | None = None
        """Learned tool specs by name (None until a tools/list answer was seen)."""
        self._listing: set[Any] = set()
        self._own: dict[str, anyio.abc.ObjectSendStream[Any]] = {}
        self._ids = itertools.count(1)
        self._tools_lock = anyio.Lock()

    async def run(self) -> None:
        """Relay until either side closes."""
        async with anyio.create_task_group() as tg:
            self._tg = tg

            async def client_side() -> None:
                await self._from_client()
                tg.cancel_scope.cancel()

            async def server_side() -> None:
                await self._from_server()
                tg.cancel_scope.cancel()

            tg.start_soon(client_side)
            tg.start_soon(server_side)

    async def _from_client(self) -> None:
        async for item in self.client_read:
            if isinstance(item, Exception):
                log.warning("unreadable message from the client", extra={"event": "mcp_bad_message"})
                continue
            message = item.message
            if isinstance(message, types.JSONRPCRequest):
                if message.method == "tools/call":
                    self._tg.start_soon(self._call_tool, item)
                    continue
                if message.method == "tools/list":
                    self._listing.add(message.id)
            await self.server_write.send(item)

    async def _from_server(self) -> None:
        async for item in self.server_read:
            if isinstance(item, Exception):
                log.warning("unreadable message from the server", extra={"event": "mcp_bad_message"})
                continue
            message = item.message
            if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
                own = self._own.pop(str(message.id), None) if isinstance(message.id, str) else None
                if own is not None:
                    await own.send(message)
                    continue
                if isinstance(message, types.JSONRPCResponse) and message.id in self._listing:
                    self._listing.discard(message.id)
                    self._learn(message.result)
            await self.client_write.send(item)

    def _learn(self, result: Any) -> None:
        tools = result.get("tools") if isinstance(result, dict) else None
        if isinstance(tools, list):
            known = dict(self.tools or {})
            known.update({t["name"]: t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)})
            self.tools = known

    async def _request(self, method: str, params: dict[str, Any]) -> Any:
        """Send the proxy's own request to the server; its answer is not relayed to the client."""
        request_id = f"reflection-mcp-proxy-{next(self._ids)}"
        send, receive = anyio.create_memory_object_stream[Any](1)
        self._own[request_id] = send
        data: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params:
            data["params"] = params
        await self.server_write.send(_message(data))
        async with receive:
            return await receive.receive()

    async def _ensure_tools(self, meta: Any) -> None:
        """List the server's tools (all pages) when no tools/list answer has been seen yet.

        `meta` is the client's request `_meta`: its protocol envelope (version, capabilities),
        which newer protocol versions require on every request, is sent along."""
        envelope = {k: v for k, v in meta.items() if k.startswith("io.modelcontextprotocol/")} if isinstance(meta, dict) else {}
        async with self._tools_lock:
            if self.tools is not None:
                return
            cursor: str | None = None
            for _ in range(100):
                params: dict[str, Any] = {"_meta": envelope} if envelope else {}
                if cursor:
                    params["cursor"] = cursor
                answer = await self._request("tools/list", params)
                if not isinstance(answer, types.JSONRPCResponse):
                    log.warning("the server refused the proxy's tools/list: %s", getattr(answer, "error", answer),
                                extra={"event": "mcp_tools_list_failed"})
                    break
                self._learn(answer.result)
                cursor = answer.result.get("nextCursor") if isinstance(answer.result, dict) else None
                if not cursor:
                    break
            if self.tools is None:
                self.tools = {}

    async def _call_tool(self, item: SessionMessage) -> None:
        request: types.JSONRPCRequest = item.message  # type: ignore[assignment]
        params = request.params if isinstance(request.params, dict) else {}
        name = params.get("name")
        arguments = params.get("arguments")
        await self._ensure_tools(params.get("_meta"))
        call = {"name": name if isinstance(name, str) else "", "arguments": arguments if arguments is not None else {}}
        decision = await self.gate.check(call, list((self.tools or {}).values()), None)
        log.info("tools/call", extra={"event": "mcp_tools_call", "actions": decision.action, "route": str(name)})
        if decision.action == "allow":
            await self.server_write.send(item)
            return
        if decision.action == "modify" and isinstance(decision.call, dict):
            corrected = {**params, "name": decision.call.get("name", name), "arguments": decision.call.get("arguments", arguments)}
            data = request.model_dump(by_alias=True, exclude_unset=True)
            await self.server_write.send(_message({**data, "params": corrected}))
            return
        text = decision.feedback or decision.reason
        # The SDK's own model, so the result carries what the negotiated protocol version requires.
        result = types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
        result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        await self.client_write.send(_message({"jsonrpc": "2.0", "id": request.id, "result": result}))


async def run_proxy(command: Sequence[str], config: ReflectionConfig) -> None:
    """Serve MCP on this process's stdin/stdout in front of the server started by `command`."""
    from reflection.gate import Gate

    if not command:
        raise ValueError("no MCP server command given: reflection mcp-proxy -- COMMAND ARGS...")
    # The child gets this process's whole environment: the proxy must be transparent to it.
    params = StdioServerParameters(command=command[0], args=list(command[1:]), env=dict(os.environ))
    async with Gate(config) as gate, stdio_client(params) as (server_read, server_write), \
            stdio_server() as (client_read, client_write):
        await McpProxy(gate, client_read, client_write, server_read, server_write).run()
