"""`reflection mcp-proxy -- COMMAND ARGS...`: an MCP proxy that checks every tool call.

The proxy runs the MCP server COMMAND as a child process (or connects to one over streamable
HTTP with `--url`; clients come over stdio, or over streamable HTTP with `--listen`) and relays JSON-RPC messages between it
and the MCP client, unchanged, in both directions: initialisation, notifications, resources,
prompts, sampling, everything. Two things are looked at on the way:

- `tools/list` answers: the tools' input schemas are learned from them (if a client calls a tool
  before listing, the proxy lists the tools itself first, with a timeout);
- `tools/call` requests: the call goes through the `Gate` (static checks, and the judge on the
  arguments when one is configured), with no conversation (checks that need one are not
  assessed). `allow` forwards it; `modify` forwards the verified correction and adds a note
  saying what was corrected to the server's result; any other action answers the client
  directly with an MCP tool error (`isError: true`) whose text is the feedback, and the server
  never sees the call. A `tools/call` without a usable id (a notification) cannot be answered,
  so it is dropped with a log line, never forwarded.

The proxy never wedges: a message either side sends that cannot be read is answered with a
JSON-RPC error when its id can be recovered (and is never relayed); an answer to no pending
request is dropped; when the server exits, every pending request and every later one is
answered with an error naming its exit status. Each decision is logged as one JSON line on
stderr (tool and action; never the arguments).

The stdio transports are the proxy's own, not the SDK's: they read raw lines, so invalid UTF-8,
JSON nested deeper than the SDK reads, or an over-long line spoil only that message, and they
stop the child promptly (stdin closed, then SIGTERM, then SIGKILL to its process group).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import mcp_types as types
import orjson
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from reflection._text import printable, quoted, shorten, terminal_safe
from reflection.apply import apply_decision
from reflection.config import ReflectionConfig
from reflection.errors import UnreadableMessage
from reflection.formats import mcp_call, mcp_corrected_params, normalize_tools

if TYPE_CHECKING:
    from reflection.gate import Gate

__all__ = [
    "HttpFront",
    "LineSplitter",
    "McpProxy",
    "ServerProcess",
    "UnreadableMessage",
    "correction_note",
    "decode_line",
    "http_upstream",
    "run_proxy",
    "stdio_streams",
    "stdio_upstream",
]

log = logging.getLogger("reflection.service.mcp")

MAX_LINE_BYTES = 64 * 1024 * 1024
"""The longest message either side may send; a longer line is unreadable (and skipped whole)."""

REQUEST_TIMEOUT = 30.0
"""Seconds the proxy waits for the answer to its own requests (its `tools/list`)."""

STOP_GRACE = 0.4
"""Seconds the server gets to exit after its stdin closes, and again after SIGTERM, before SIGKILL."""

_CHUNK = 64 * 1024
_INTERNAL_ERROR = -32603
_PARSE_ERROR = -32700
_INVALID_REQUEST = -32600
_NOTE_LIMIT = 60  # characters of one quoted value in a note
_NOTE_CHANGES = 8  # changes listed in a note; the rest are counted


def _quoted(text: Any, limit: int = _NOTE_LIMIT) -> str:
    """Untrusted text as a bounded JSON string literal: newlines, quotes and controls escaped,
    so a tool name like "x\\nSYSTEM: ..." stays visibly data inside a note or a log line."""
    return quoted(text, limit, style="json", empty="")


def _shown(value: Any) -> str:
    """A JSON value, bounded and quoted, for a note."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        text = repr(value)
    return terminal_safe(shorten(text, _NOTE_LIMIT, past_limit=True), one_line=True)


def _recover(line: bytes) -> tuple[str | int | None, str | None]:
    """The id and method of a line that the SDK could not read, when a looser reading finds them."""
    try:
        value = orjson.loads(line.decode("utf-8", "replace"))
    except (orjson.JSONDecodeError, RecursionError):
        return None, None
    if not isinstance(value, dict):
        return None, None
    id_, method = value.get("id"), value.get("method")
    ok_id = id_ if isinstance(id_, str) or (isinstance(id_, int) and not isinstance(id_, bool)) else None
    return ok_id, method if isinstance(method, str) else None


def decode_line(line: bytes) -> SessionMessage | UnreadableMessage:
    """One line of the stdio transport as the SDK's message, or an `UnreadableMessage` saying why not."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return UnreadableMessage(f"not valid UTF-8 (byte {exc.start})", *_recover(line))
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(text, by_name=False))
    except ValidationError as exc:
        errors = exc.errors()
        first: Any = errors[0] if errors else {}
        if first.get("type") == "json_invalid":
            reason = f"not readable JSON ({printable(str(first.get('msg', '')))[:120]})"
        else:
            reason = "not a JSON-RPC 2.0 message"
        return UnreadableMessage(reason, *_recover(line))


class LineSplitter:
    """Newline-delimited messages from byte chunks, each at most MAX_LINE_BYTES: the rest of a
    longer line is skipped up to its newline and the line reported as unreadable."""

    def __init__(self, limit: int = MAX_LINE_BYTES):
        self.limit = limit
        self._buffer = bytearray()
        self._skipping = False

    def feed(self, chunk: bytes) -> list[SessionMessage | UnreadableMessage]:
        """The messages that `chunk` completes (blank lines are skipped)."""
        out: list[SessionMessage | UnreadableMessage] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                if not self._skipping:
                    self._buffer += chunk[start:]
                    if len(self._buffer) > self.limit:
                        self._buffer.clear()
                        self._skipping = True
                        out.append(UnreadableMessage(f"longer than {self.limit} bytes"))
                return out
            if self._skipping:
                self._skipping = False
            else:
                self._buffer += chunk[start:end]
                if len(self._buffer) > self.limit:
                    out.append(UnreadableMessage(f"longer than {self.limit} bytes"))
                elif self._buffer.strip():
                    out.append(decode_line(bytes(self._buffer)))
            self._buffer.clear()
            start = end + 1


def _encode(item: SessionMessage) -> bytes:
    return item.message.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8") + b"\n"


@asynccontextmanager
async def stdio_streams(stdin_fd: int = 0, stdout_fd: int = 1) -> AsyncIterator[tuple[Any, Any]]:
    """This process's stdin and stdout as the client side of the proxy: a receive stream of
    `SessionMessage | UnreadableMessage` that ends at stdin's end, and a send stream of messages.

    Each descriptor is served by a daemon thread, so a client that neither writes nor reads can
    never keep the process from exiting (a worker thread blocked in a read would). On exit, what
    was sent is flushed for up to a second."""
    token = anyio.lowlevel.current_token()
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
    written = anyio.Event()

    def deliver(item: Any) -> bool:
        try:
            anyio.from_thread.run(read_send.send, item, token=token)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.RunFinishedError, RuntimeError):
            return False
        return True

    def reader() -> None:
        lines = LineSplitter()
        try:
            while True:
                try:
                    chunk = os.read(stdin_fd, _CHUNK)
                except OSError:
                    chunk = b""
                if not chunk or not all(deliver(item) for item in lines.feed(chunk)):
                    break
        finally:
            with suppress(anyio.RunFinishedError, RuntimeError):
                anyio.from_thread.run_sync(read_send.close, token=token)

    def writer() -> None:
        try:
            while True:
                try:
                    item = anyio.from_thread.run(write_receive.receive, token=token)
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.RunFinishedError, RuntimeError):
                    return
                data = memoryview(_encode(item))
                while data:
                    try:
                        data = data[os.write(stdout_fd, data) :]
                    except BrokenPipeError:
                        return  # the client is gone; what is left to write has no reader
        finally:
            with suppress(anyio.RunFinishedError, RuntimeError):
                anyio.from_thread.run_sync(written.set, token=token)

    threading.Thread(target=reader, name="reflection-mcp-stdin", daemon=True).start()
    threading.Thread(target=writer, name="reflection-mcp-stdout", daemon=True).start()
    try:
        yield read_receive, write_send
    finally:
        read_receive.close()
        write_send.close()
        with anyio.move_on_after(1.0, shield=True):
            await written.wait()


class ServerProcess:
    """The MCP server, run as a child in its own process group with its stdin and stdout as the
    transport (its stderr is this process's). `read` gives `SessionMessage | UnreadableMessage`
    until the server's stdout ends; `write` takes messages for it. Run `pump()` in a task."""

    def __init__(self, process: anyio.abc.Process):
        self.process = process
        self._read_send, self.read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        self.write, self._write_receive = anyio.create_memory_object_stream[SessionMessage](0)
        self.stopping = False
        """True once the proxy began stopping the server (its exit is then not a failure)."""

    @classmethod
    async def start(cls, command: Sequence[str], env: dict[str, str] | None = None) -> ServerProcess:
        """Start `command` (raises OSError when it cannot be run)."""
        process = await anyio.open_process(list(command), env=env, stderr=None, start_new_session=True)
        return cls(process)

    async def pump(self) -> None:
        """Move bytes between the server's pipes and the streams until its stdout ends."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._writer)
            await self._reader()
            tg.cancel_scope.cancel()

    async def _reader(self) -> None:
        assert self.process.stdout is not None
        lines = LineSplitter()
        async with self._read_send:
            with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                while True:
                    chunk = await self.process.stdout.receive(_CHUNK)
                    for item in lines.feed(chunk):
                        await self._read_send.send(item)

    async def _writer(self) -> None:
        assert self.process.stdin is not None
        broken = False
        async with self._write_receive:
            async for item in self._write_receive:
                if broken:
                    continue  # the server closed its stdin; its stdout's end tells the proxy
                try:
                    await self.process.stdin.send(_encode(item))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    broken = True
                    log.warning("the MCP server no longer reads its input", extra={"event": "mcp_server_input_closed"})

    async def wait_exit(self, timeout: float) -> int | None:
        """The server's exit status, waiting up to `timeout` seconds (None: still running)."""
        with anyio.move_on_after(timeout):
            # returncode, not wait(): wait() also waits for every inheritor of the pipes.
            while self.process.returncode is None:
                await anyio.sleep(0.01)
        return self.process.returncode

    async def stop(self) -> int | None:
        """Stop the server: close its stdin (the MCP way), then SIGTERM and SIGKILL its process
        group, each after STOP_GRACE seconds. Returns its exit status."""
        self.stopping = True
        with anyio.CancelScope(shield=True):
            if self.process.stdin is not None:
                with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await self.process.stdin.aclose()
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if await self.wait_exit(STOP_GRACE) is not None:
                    break
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.process.pid, sig)
            status = await self.wait_exit(STOP_GRACE)
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await self.process.aclose()
        return status

    async def describe_end(self) -> str:
        """Why the server stopped answering, for errors and the log: its exit status if it exits
        within a second of closing its output."""
        status = await self.wait_exit(1.0)
        if status is None:
            text = "the MCP server closed its output"
        elif status < 0:
            text = f"the MCP server was killed by signal {_signal_name(-status)}"
        else:
            text = f"the MCP server exited with status {status}"
        if not self.stopping:
            log.warning(text, extra={"event": "mcp_server_exit", "status": status})
        return text


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _key(id_: Any) -> tuple[bool, Any]:
    """A JSON-RPC id as a dict key: 1 and "1" are different ids."""
    return isinstance(id_, str), id_


@dataclass
class _Pending:
    """A client request the server has not answered yet."""

    method: str
    note: str | None = None
    """For a corrected tools/call: the note to add to the server's result."""


class McpProxy:
    """Relays between an MCP client (`client_read`/`client_write`) and a server (`server_read`/`server_write`),
    gating `tools/call` with `gate`. The read streams give `SessionMessage`s or exceptions (an
    `UnreadableMessage` says what could be recovered). `server_ended` says why the server's
    stream ended; `request_timeout` bounds the proxy's own requests."""

    def __init__(
        self,
        gate: Gate,
        client_read: Any,
        client_write: Any,
        server_read: Any,
        server_write: Any,
        *,
        server_ended: Callable[[], Awaitable[str]] | None = None,
        request_timeout: float = REQUEST_TIMEOUT,
    ):
        self.gate = gate
        self.client_read, self.client_write = client_read, client_write
        self.server_read, self.server_write = server_read, server_write
        self.request_timeout = request_timeout
        self._server_ended = server_ended
        self.tools: dict[str, dict[str, Any]] | None = None
        """Learned tool specs by name (None until a tools/list answer was seen)."""
        self._inventory: Any = None  # the learned tools normalised once, until they change
        self._pending: dict[tuple[bool, Any], _Pending] = {}
        self._unsent: set[tuple[bool, Any]] = set()  # tools/calls being checked, not yet sent to the server
        self._own: dict[str, MemoryObjectSendStream[Any]] = {}
        # Unguessable, so a client request cannot take the id of one of the proxy's own.
        self._own_prefix = f"reflection-{uuid.uuid4().hex[:12]}-"
        self._ids = itertools.count(1)
        self._tools_lock = anyio.Lock()
        self.server_gone: str | None = None
        """Why the server can no longer answer (None while it can)."""

    async def run(self) -> None:
        """Relay until the client's stream ends. When the server's ends first, the proxy answers
        every request with an error until then."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._server_side)
            # A transport that is shut down (an HTTP session ended) closes its stream instead of ending it.
            with suppress(anyio.ClosedResourceError):
                await self._from_client()
            tg.cancel_scope.cancel()

    # -- client to server ----------------------------------------------------------------------

    async def _from_client(self) -> None:
        async for item in self.client_read:
            if isinstance(item, Exception):
                await self._unreadable_from_client(item)
                continue
            message = item.message
            if isinstance(message, types.JSONRPCRequest):
                await self._client_request(item, message)
            elif isinstance(message, types.JSONRPCNotification) and message.method == "tools/call":
                # Without an id (absent, null, or not a string or integer) nobody can be told
                # the outcome; forwarding it would run a call nobody checked.
                log.warning(
                    "tools/call without an id dropped: a notification cannot be answered",
                    extra={"event": "mcp_tools_call_without_id"},
                )
            else:
                if isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
                    # A cancelled request may never be answered: stop waiting for it, and a call
                    # still being checked is then never sent.
                    params = message.params if isinstance(message.params, dict) else {}
                    self._pending.pop(_key(params.get("requestId")), None)
                await self._to_server(item)

    async def _client_request(self, item: SessionMessage, message: types.JSONRPCRequest) -> None:
        key = _key(message.id)
        if key in self._pending:
            await self._error_to_client(
                message.id, _INVALID_REQUEST, "reflection: a request with this id is still pending"
            )
            return
        if self.server_gone is not None:
            await self._error_to_client(message.id, _INTERNAL_ERROR, f"reflection: {self.server_gone}")
            return
        if message.method == "tools/call":
            self._pending[key] = _Pending("tools/call")  # held while it is checked: its id is in use
            self._tg.start_soon(self._call_tool, item, message)
            return
        self._pending[key] = _Pending(message.method)
        if not await self._to_server(item):
            self._pending.pop(key, None)
            await self._error_to_client(message.id, _INTERNAL_ERROR, f"reflection: {self.server_gone}")

    async def _unreadable_from_client(self, error: Exception) -> None:
        reason = getattr(error, "reason", None) or "unreadable"
        id_ = getattr(error, "id", None)
        method = getattr(error, "method", None)
        log.warning("unreadable message from the client: %s", reason, extra={"event": "mcp_bad_message"})
        if id_ is None:
            return
        if method is not None:  # a request: its sender waits for an answer
            await self._error_to_client(id_, _PARSE_ERROR, f"reflection: the request could not be read: {reason}")
        else:  # the client's answer to a server request: the server waits for it
            await self._to_server(
                SessionMessage(
                    types.JSONRPCError(
                        jsonrpc="2.0",
                        id=id_,
                        error=types.ErrorData(
                            code=_PARSE_ERROR, message=f"reflection: the client's answer could not be read: {reason}"
                        ),
                    )
                )
            )

    async def _to_server(self, item: SessionMessage) -> bool:
        """Send to the server; False when it is gone."""
        if self.server_gone is not None:
            return False
        try:
            # Only the message crosses: metadata belongs to the transport it came in on.
            await self.server_write.send(SessionMessage(item.message))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self.server_gone = self.server_gone or "the MCP server is gone"
            return False
        return True

    # -- server to client ----------------------------------------------------------------------

    async def _server_side(self) -> None:
        with suppress(anyio.ClosedResourceError):
            await self._from_server()
        reason = await self._server_ended() if self._server_ended else "the MCP server closed the connection"
        self.server_gone = reason
        for own in self._own.values():
            own.close()  # its waiter gets EndOfStream
        self._own.clear()
        # Calls still being checked are answered by their own task, which sees `server_gone`.
        waiting = [(key, request) for key, request in self._pending.items() if key not in self._unsent]
        for key, request in waiting:
            del self._pending[key]
            await self._error_to_client(
                key[1], _INTERNAL_ERROR, f"reflection: {reason} before answering {request.method}"
            )

    async def _from_server(self) -> None:
        async for item in self.server_read:
            if isinstance(item, Exception):
                await self._unreadable_from_server(item)
                continue
            message = item.message
            if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
                await self._answer(item, message)
                continue
            if isinstance(message, types.JSONRPCNotification) and message.method == "notifications/tools/list_changed":
                self.tools = None  # the next call lists them again
                self._inventory = None
            await self._send_client(item)

    async def _answer(self, item: SessionMessage, message: types.JSONRPCResponse | types.JSONRPCError) -> None:
        own = self._own.pop(message.id, None) if isinstance(message.id, str) else None
        if own is not None:
            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await own.send(message)
            return
        request = self._pending.pop(_key(message.id), None) if message.id is not None else None
        if request is None or _key(message.id) in self._unsent:
            # An answer to nothing the client is waiting for (a forged or repeated id): relaying
            # it could answer a refused call with the server's words.
            if request is not None:
                self._pending[_key(message.id)] = request
            log.warning(
                "answer with an id no pending request has, dropped: %s",
                _quoted(message.id),
                extra={"event": "mcp_wrong_id"},
            )
            return
        if isinstance(message, types.JSONRPCResponse):
            if request.method == "tools/list":
                self._learn(message.result)
            if request.note is not None:
                item = SessionMessage(
                    types.JSONRPCResponse(jsonrpc="2.0", id=message.id, result=_with_note(message.result, request.note))
                )
        elif request.note is not None:
            error = message.error.model_copy(update={"message": f"{message.error.message} ({request.note})"})
            item = SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error))
        await self._send_client(item)

    async def _unreadable_from_server(self, error: Exception) -> None:
        reason = getattr(error, "reason", None) or "unreadable"
        id_ = getattr(error, "id", None)
        method = getattr(error, "method", None)
        log.warning("unreadable message from the MCP server: %s", reason, extra={"event": "mcp_bad_message"})
        if id_ is None:
            return
        if method is not None:  # the server's own request: answer it, don't relay it
            await self._to_server(
                SessionMessage(
                    types.JSONRPCError(
                        jsonrpc="2.0",
                        id=id_,
                        error=types.ErrorData(
                            code=_PARSE_ERROR, message=f"reflection: the request could not be read: {reason}"
                        ),
                    )
                )
            )
            return
        own = self._own.pop(id_, None) if isinstance(id_, str) else None
        if own is not None:
            own.close()
            return
        key = _key(id_)
        if key in self._pending and key not in self._unsent:
            request = self._pending.pop(key)
            note = f" ({request.note})" if request.note else ""
            await self._error_to_client(
                id_,
                _INTERNAL_ERROR,
                f"reflection: the MCP server's answer to {request.method} could not be read: {reason}{note}",
            )

    # -- tools ---------------------------------------------------------------------------------

    def _learn(self, result: Any) -> None:
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return
        known = dict(self.tools or {})
        changed = self.tools is None
        for tool in tools:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str) and known.get(tool["name"]) != tool:
                known[tool["name"]] = tool
                changed = True
        if changed:
            self.tools = known
            self._inventory = None

    def _tool_inventory(self) -> Any:
        """The learned tools normalised, built once per content: with many tools, normalising
        them for every call would cost more than the call's check."""
        if self._inventory is None:
            self._inventory = normalize_tools(list((self.tools or {}).values()))
        return self._inventory

    async def _request(self, method: str, params: dict[str, Any]) -> Any:
        """Send the proxy's own request to the server and wait up to `request_timeout` for its
        answer (not relayed to the client). None when there is none."""
        request_id = f"{self._own_prefix}{next(self._ids)}"
        send, receive = anyio.create_memory_object_stream[Any](1)
        self._own[request_id] = send
        data: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params:
            data["params"] = params
        try:
            if not await self._to_server(SessionMessage(types.jsonrpc_message_adapter.validate_python(data))):
                return None
            with anyio.move_on_after(self.request_timeout):
                async with receive:
                    return await receive.receive()
            log.warning(
                "the MCP server did not answer the proxy's %s within %s s",
                method,
                self.request_timeout,
                extra={"event": "mcp_own_request_timeout"},
            )
            return None
        except anyio.EndOfStream:
            return None
        finally:
            self._own.pop(request_id, None)

    async def _ensure_tools(self, meta: Any) -> None:
        """List the server's tools (all pages) when no tools/list answer has been seen yet.
        When the listing fails, the call is checked against what is known and the next call
        tries again.

        `meta` is the client's request `_meta`: its protocol envelope (version, capabilities),
        which newer protocol versions require on every request, is sent along."""
        envelope = (
            {k: v for k, v in meta.items() if k.startswith("io.modelcontextprotocol/")}
            if isinstance(meta, dict)
            else {}
        )
        async with self._tools_lock:
            if self.tools is not None:
                return
            listed = None
            # One deadline for all pages, so the lock is never held longer than that.
            with anyio.move_on_after(self.request_timeout) as deadline:
                listed = await self._list_all(envelope)
            if deadline.cancelled_caught:
                log.warning(
                    "the MCP server's tools could not be listed within %s s",
                    self.request_timeout,
                    extra={"event": "mcp_tools_list_failed"},
                )
            if listed is None:
                return
            self._learn({"tools": list(listed.values())})

    async def _list_all(self, envelope: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
        """Every page of the server's tools by name (at most 100 pages); None when a page fails."""
        cursor: str | None = None
        listed: dict[str, dict[str, Any]] = {}
        for _ in range(100):
            params: dict[str, Any] = {"_meta": envelope} if envelope else {}
            if cursor:
                params["cursor"] = cursor
            answer = await self._request("tools/list", params)
            if not isinstance(answer, types.JSONRPCResponse):
                reason = getattr(getattr(answer, "error", None), "message", None) or "no readable answer"
                log.warning(
                    "the MCP server's tools could not be listed: %s",
                    _quoted(reason, 200),
                    extra={"event": "mcp_tools_list_failed"},
                )
                return None
            tools = answer.result.get("tools") if isinstance(answer.result, dict) else None
            for tool in tools if isinstance(tools, list) else ():
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    listed[tool["name"]] = tool
            cursor = answer.result.get("nextCursor") if isinstance(answer.result, dict) else None
            if not isinstance(cursor, str) or not cursor:
                break
        return listed

    async def _call_tool(self, item: SessionMessage, request: types.JSONRPCRequest) -> None:
        key = _key(request.id)
        self._unsent.add(key)
        try:
            await self._check_and_forward(item, request)
        except Exception:
            # Never forward what could not be checked; the client gets an answer all the same.
            log.exception("tools/call could not be checked", extra={"event": "mcp_tools_call_failed"})
            if self._pending.pop(key, None) is not None:
                await self._refuse(request.id, "reflection could not check this call, so it was not run.")
        finally:
            self._unsent.discard(key)

    async def _check_and_forward(self, item: SessionMessage, request: types.JSONRPCRequest) -> None:
        key = _key(request.id)
        params = request.params if isinstance(request.params, dict) else {}
        name = params.get("name")
        await self._ensure_tools(params.get("_meta"))
        call = mcp_call(params)
        # No conversation: the proxy sees only the call. Checks that need one are not assessed.
        decision = await self.gate.check(call, self._tool_inventory(), None)
        assert not isinstance(decision, list)  # one call, one decision
        log.info("tools/call", extra={"event": "mcp_tools_call", "actions": decision.action, "route": _quoted(name)})
        if key not in self._pending:  # the client cancelled it while it was checked
            return
        applied = apply_decision(decision, call)
        if applied.runs != "nothing" and self.server_gone is not None:
            self._pending.pop(key, None)
            await self._error_to_client(request.id, _INTERNAL_ERROR, f"reflection: {self.server_gone}")
            return
        if applied.runs == "proposed":
            self._unsent.discard(key)
            if not await self._to_server(item):
                self._pending.pop(key, None)
                await self._error_to_client(request.id, _INTERNAL_ERROR, f"reflection: {self.server_gone}")
            return
        if applied.runs == "corrected" and isinstance(applied.call, dict):
            corrected = mcp_corrected_params(params, call, applied.call)
            self._pending[key] = _Pending(
                "tools/call",
                correction_note(call["name"], call["arguments"], corrected["name"], corrected["arguments"]),
            )
            data = request.model_dump(by_alias=True, exclude_unset=True)
            self._unsent.discard(key)
            if not await self._to_server(
                SessionMessage(types.jsonrpc_message_adapter.validate_python({**data, "params": corrected}))
            ):
                self._pending.pop(key, None)
                await self._error_to_client(request.id, _INTERNAL_ERROR, f"reflection: {self.server_gone}")
            return
        self._pending.pop(key, None)
        await self._refuse(request.id, applied.text)

    # -- answers -------------------------------------------------------------------------------

    async def _refuse(self, id_: Any, text: str) -> None:
        # The SDK's own model, so the result carries what the negotiated protocol version requires.
        result = types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
        data = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        await self._send_client(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=id_, result=data)))

    async def _error_to_client(self, id_: Any, code: int, text: str) -> None:
        await self._send_client(
            SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=id_, error=types.ErrorData(code=code, message=text)))
        )

    async def _send_client(self, item: SessionMessage) -> None:
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self.client_write.send(SessionMessage(item.message))


def correction_note(name: str, arguments: Any, new_name: Any, new_arguments: Any) -> str:
    """What a correction changed, for the client: `reflection: the call was corrected before it
    ran: $.days "3" → 3`. Names, keys and values are quoted and bounded."""
    changes: list[str] = []
    if new_name != name:
        changes.append(f"tool {_quoted(name)} → {_quoted(new_name)}")
    old = arguments if isinstance(arguments, dict) else {}
    new = new_arguments if isinstance(new_arguments, dict) else {}
    for key in dict.fromkeys([*old, *new]):
        if key not in new:
            changes.append(f"{_quoted(key)} removed")
        elif key not in old:
            changes.append(f"{_quoted(key)} added as {_shown(new[key])}")
        elif old[key] != new[key] or type(old[key]) is not type(new[key]):
            changes.append(f"{_quoted(key)}: {_shown(old[key])} → {_shown(new[key])}")
    if not isinstance(arguments, dict) and arguments != new_arguments:
        changes.append(f"arguments {_shown(arguments)} → {_shown(new_arguments)}")
    if len(changes) > _NOTE_CHANGES:
        changes[_NOTE_CHANGES:] = [f"and {len(changes) - _NOTE_CHANGES} more"]
    return "reflection: the call was corrected before it ran: " + ("; ".join(changes) or "no visible change")


def _with_note(result: Any, note: str) -> Any:
    """The server's result with `note` added as a last text content block (structuredContent,
    if any, stays as the server sent it)."""
    if not isinstance(result, dict):
        return result
    content = result.get("content")
    block = {"type": "text", "text": note}
    if isinstance(content, list):
        return {**result, "content": [*content, block]}
    if content is None and "task" not in result:  # a task's result comes later, from tasks/result
        return {**result, "content": [block]}
    return result


def _exit_code(status: int | None) -> int:
    if status is None or status == 0:
        return 0
    return 128 - status if status < 0 else status


Upstream = Callable[[], Any]
"""A factory of async context managers, each a fresh connection to the MCP server, entered as
`(read, write, server_ended)`."""


def stdio_upstream(command: Sequence[str], env: dict[str, str] | None = None) -> Upstream:
    """Connections that each run `command` as a child server (stopped when the connection ends)."""

    @asynccontextmanager
    async def connect() -> AsyncIterator[tuple[Any, Any, Callable[[], Awaitable[str]]]]:
        server = await ServerProcess.start(command, env=env)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.pump)
                yield server.read, server.write, server.describe_end
                tg.cancel_scope.cancel()
        finally:
            await server.stop()

    return connect


def http_upstream(url: str, headers: dict[str, str] | None = None) -> Upstream:
    """Connections to the MCP server at `url` over streamable HTTP (the SDK's client transport),
    with `headers` (e.g. Authorization) on every request."""
    from mcp.client.streamable_http import (
        create_mcp_http_client,
        streamable_http_client,
    )

    async def ended() -> str:
        return f"the connection to the MCP server at {_quoted(url, 200)} ended"

    @asynccontextmanager
    async def connect() -> AsyncIterator[tuple[Any, Any, Callable[[], Awaitable[str]]]]:
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(url, http_client=http) as (read, write),
        ):
            yield read, write, ended

    return connect


class HttpFront:
    """An ASGI application serving MCP over streamable HTTP at `path`: each client session
    (opened by its initialize request) gets its own `McpProxy` and its own upstream connection
    (for a command, its own child server), ended with the session (DELETE, idle timeout or the
    proxy's shutdown). Run it with `serve()`."""

    def __init__(
        self,
        gate: Gate,
        upstream: Upstream,
        *,
        path: str = "/mcp",
        request_timeout: float = REQUEST_TIMEOUT,
        max_sessions: int = 100,
        idle_timeout: float = 600.0,
        security_settings: Any = None,
    ):
        self.gate = gate
        self.upstream = upstream
        self.path = path
        self.request_timeout = request_timeout
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self.security_settings = security_settings
        self.sessions: dict[str, Any] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
        from mcp.server.transport_security import TransportSecurityMiddleware
        from starlette.requests import Request
        from starlette.responses import JSONResponse

        if scope["type"] != "http":
            return
        if scope["path"].rstrip("/") != self.path:
            await JSONResponse({"error": "not found"}, status_code=404)(scope, receive, send)
            return
        # Host and Origin first (a web page must not reach the tools by DNS rebinding), before
        # anything is opened for the request.
        refused = await TransportSecurityMiddleware(self.security_settings).validate_request(
            Request(scope, receive), is_post=scope["method"] == "POST"
        )
        if refused is not None:
            await refused(scope, receive, send)
            return
        session_id = dict(scope["headers"]).get(MCP_SESSION_ID_HEADER.encode())
        if session_id is not None:
            transport = self.sessions.get(session_id.decode("latin-1"))
            if transport is None:
                await _jsonrpc_error_response("Session not found", 404)(scope, receive, send)
                return
            await transport.handle_request(scope, receive, send)
            if transport.is_terminated:
                self.sessions.pop(session_id.decode("latin-1"), None)
            return
        if len(self.sessions) >= self.max_sessions:
            await _jsonrpc_error_response("Too many open sessions", 503)(scope, receive, send)
            return
        await self._open(scope, receive, send)

    async def _open(self, scope: Any, receive: Any, send: Any) -> None:
        from mcp.server.streamable_http import StreamableHTTPServerTransport

        # Only an initialize request opens a session: anything else is refused before a server
        # connection (for a command, a process) is made for it.
        body = await _read_body(receive, _MAX_OPENING_BYTES) if scope.get("method") == "POST" else None
        if body is None or not _is_initialize(body):
            await _jsonrpc_error_response("Bad Request: a session starts with an initialize request", 400)(
                scope, receive, send
            )
            return
        replayed = False

        async def receive_again() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        session_id = uuid.uuid4().hex
        transport = StreamableHTTPServerTransport(
            mcp_session_id=session_id, security_settings=self.security_settings, idle_timeout=self.idle_timeout
        )
        self.sessions[session_id] = transport
        status: list[int] = []

        async def watch(message: Any) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        assert self._tg is not None, "serve() runs the sessions"
        try:
            await self._tg.start(self._session, transport)
            await transport.handle_request(scope, receive_again, watch)
        finally:
            if not status or status[0] >= 400:  # nothing was opened: no session to keep
                self.sessions.pop(session_id, None)
                with anyio.CancelScope(shield=True):
                    await transport.terminate()

    async def _session(self, transport: Any, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            async with transport.connect() as (client_read, client_write):
                task_status.started()
                idle = transport.idle_scope or anyio.CancelScope()
                with idle:
                    async with self.upstream() as (server_read, server_write, ended):
                        await McpProxy(
                            self.gate,
                            client_read,
                            client_write,
                            server_read,
                            server_write,
                            server_ended=ended,
                            request_timeout=self.request_timeout,
                        ).run()
        except Exception:
            log.exception("MCP session ended by an error", extra={"event": "mcp_session_failed"})
        finally:
            self.sessions.pop(transport.mcp_session_id or "", None)
            with anyio.CancelScope(shield=True):
                await transport.terminate()

    async def serve(self, host: str, port: int, stop: anyio.Event) -> None:
        """Listen on `host`:`port` until `stop` is set, then end every session. Unless set,
        `security_settings` accepts only Host and Origin headers naming loopback or `host`."""
        import uvicorn
        from mcp.server.transport_security import (
            RequestBodyLimitMiddleware,
            TransportSecuritySettings,
        )

        if self.security_settings is None:
            names = ["127.0.0.1", "localhost", "[::1]", f"[{host}]" if ":" in host else host]
            self.security_settings = TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=[f"{name}:*" for name in names],
                allowed_origins=[f"{scheme}://{name}:*" for name in names for scheme in ("http", "https")],
            )

        class _Server(uvicorn.Server):
            @contextmanager
            def capture_signals(self) -> Iterator[None]:  # the proxy handles its signals itself
                yield

        app = RequestBodyLimitMiddleware(self, _MAX_BODY_BYTES)
        server = _Server(
            uvicorn.Config(
                app,
                host=host,
                port=port,
                lifespan="off",
                log_config=None,
                access_log=False,
                server_header=False,
                timeout_graceful_shutdown=2,
            )
        )
        async with anyio.create_task_group() as tg:
            self._tg = tg

            async def stopper() -> None:
                await stop.wait()
                server.should_exit = True

            tg.start_soon(stopper)
            await server.serve()
            tg.cancel_scope.cancel()


_MAX_OPENING_BYTES = 1024 * 1024  # an initialize request is small
_MAX_BODY_BYTES = 4 * 1024 * 1024  # one client message (the SDK's default)


async def _read_body(receive: Any, limit: int) -> bytes | None:
    """The request's body, or None when it is longer than `limit` bytes."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body"):
            return bytes(body)


def _is_initialize(body: bytes) -> bool:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(value, dict) and value.get("method") == "initialize"


def _jsonrpc_error_response(message: str, status: int) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse(
        {"jsonrpc": "2.0", "id": None, "error": {"code": _INVALID_REQUEST, "message": message}}, status_code=status
    )


async def _stop_on_signal(stop: Callable[[int], None]) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for number in signals:
            log.info("stopping on %s", _signal_name(number), extra={"event": "mcp_signal"})
            stop(number)
            return


async def run_proxy(
    command: Sequence[str],
    config: ReflectionConfig,
    *,
    url: str | None = None,
    headers: dict[str, str] | None = None,
    listen: tuple[str, int] | None = None,
    request_timeout: float = REQUEST_TIMEOUT,
) -> int:
    """Check every tool call between MCP clients and an MCP server, until stdin ends (or, with
    `listen`, forever), SIGINT or SIGTERM.

    The server is `command`, run as a child over stdio, or the one at `url` over streamable
    HTTP (with `headers`). Clients come over this process's stdin/stdout, or with `listen=(host,
    port)` over streamable HTTP at `/mcp`, each session with its own server connection. Returns
    the exit code: 128 + the signal for SIGINT/SIGTERM; with one stdio server, its own status
    when it exited by itself with a failure; else 0."""
    from reflection.gate import Gate

    if bool(command) == bool(url):
        raise ValueError(
            "give the MCP server as a command (reflection mcp-proxy -- COMMAND ARGS...) or as --url, not both"
        )
    received: list[int] = []
    stop = anyio.Event()

    def on_signal(number: int) -> None:
        received.append(number)
        stop.set()

    died, status = False, None
    # Started first, so a command that cannot run raises its OSError as it is.
    server = await ServerProcess.start(command, env=dict(os.environ)) if listen is None and not url else None
    try:
        async with Gate(config) as gate, anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signal, on_signal)
            if listen is not None:
                # A child gets this process's whole environment: the proxy must be transparent to it.
                upstream = http_upstream(url, headers) if url else stdio_upstream(command, env=dict(os.environ))
                await HttpFront(gate, upstream, request_timeout=request_timeout).serve(*listen, stop)
            else:

                async def cancel_on_stop() -> None:
                    await stop.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(cancel_on_stop)
                async with stdio_streams() as (client_read, client_write):
                    if url:
                        async with http_upstream(url, headers)() as (server_read, server_write, ended):
                            await McpProxy(
                                gate,
                                client_read,
                                client_write,
                                server_read,
                                server_write,
                                server_ended=ended,
                                request_timeout=request_timeout,
                            ).run()
                    else:
                        assert server is not None
                        tg.start_soon(server.pump)
                        await McpProxy(
                            gate,
                            client_read,
                            client_write,
                            server.read,
                            server.write,
                            server_ended=server.describe_end,
                            request_timeout=request_timeout,
                        ).run()
            tg.cancel_scope.cancel()
    finally:
        if server is not None:
            died = server.process.returncode is not None and not server.stopping
            status = await server.stop()
    if received:
        return 128 + received[0]
    return _exit_code(status) if died else 0
