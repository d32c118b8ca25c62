"""Stream reassembly for the gateway: an upstream's event stream relayed with every tool call held
until it is whole, then gated, below every API module (`gateway`, `_responses`, `_anthropic`).

- `relay` is the one relay loop: the upstream's events read within the bounds
  (`upstream.max_response_bytes` per event and per stream, the request's deadline), each handed
  to the API's own handler, and a stream that breaks, goes past a bound or the deadline, or that
  the gate refuses, ended with an error event in the API's shape: no call passes unchecked.
- `ChatChoice` holds one Chat Completions choice's streamed tool-call deltas by index until
  the choice finishes (the Responses and Anthropic modules hold their items and blocks likewise).
- `data_event`, `named_event` and `error_event` write the events.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import anyio
from starlette.responses import Response

from reflection.service._dialects import Refused, problem, read_reply, reply_bytes
from reflection.service._sse import Event, StreamTooLarge, events

__all__ = ["ChatChoice", "data_event", "error_event", "finished", "named_event", "nothing", "relay"]

DEADLINE_MARGIN = 0.25
"""Seconds before the service's deadline at which a stream ends with its own error event (rather
than being cut mid-chunk)."""


async def relay(
    response: aiohttp.ClientResponse,
    deadline: float | None,
    limit: int,
    *,
    each: Callable[[Event], AsyncIterator[bytes]],
    end: Callable[[], AsyncIterator[bytes]],
    unfinished: Callable[[], str | None],
    refused: Callable[[dict[str, Any]], bytes],
    broken: Callable[[str], bytes],
) -> AsyncIterator[bytes]:
    """The upstream's events as the client gets them: `each` event's output, then `end`'s once
    the stream is over; `unfinished` says why a stream that ended is incomplete (None: it is not).
    A `Refused` answer ends the stream with `refused(error_event(...))`; a stream that breaks,
    goes past `limit` bytes or `deadline` (a `time.monotonic()` reading) or is unfinished, with
    `broken(why)`. The upstream response is released in every case."""
    remaining = max(0.0, deadline - time.monotonic() - DEADLINE_MARGIN) if deadline is not None else float("inf")
    failure: str | None = "the upstream's stream did not finish in time (the request's deadline)"
    try:
        with anyio.move_on_after(remaining):
            try:
                async for event in events(response.content.iter_any(), max_bytes=limit, max_total=limit):
                    async for out in each(event):
                        yield out
                async for out in end():
                    yield out
                failure = unfinished()
            except StreamTooLarge as exc:
                failure = f"{exc} (upstream.max_response_bytes)"
            except Refused as exc:
                failure = None
                yield refused(error_event(exc.response))
            except (TimeoutError, aiohttp.ClientError) as exc:
                failure = f"the upstream's stream broke off: {type(exc).__name__}"
        if failure is not None:
            yield broken(failure)
    finally:
        response.release()


async def nothing() -> AsyncIterator[bytes]:
    """No more output at the end of a stream."""
    return
    yield  # pragma: no cover - makes this an async generator


def finished() -> str | None:
    """A stream that ended is complete."""
    return None


def data_event(chunk: Any) -> bytes:
    """One `data:` event (Chat Completions)."""
    return b"data: " + reply_bytes(chunk) + b"\n\n"


def named_event(data: dict[str, Any]) -> bytes:
    """One event named by its data's `type` (the Responses API, Anthropic Messages)."""
    return f"event: {data['type']}\ndata: ".encode() + reply_bytes(data) + b"\n\n"


def error_event(response: Response) -> dict[str, Any]:
    """What ends a stream that cannot go on: the upstream's own error object when it sent one
    (a 429 on a re-ask), else the gateway's reason, in the shape the SDKs raise on."""
    data = read_reply(bytes(response.body))
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return {"error": {**data["error"], "status": response.status_code}}
    detail = data.get("detail") if isinstance(data, dict) else None
    return {
        "error": {
            "message": str(detail or "the upstream's answer could not be passed on"),
            "type": "reflection_gateway_error",
            "code": None,
            "status": response.status_code,
        }
    }


class ChatChoice:
    """One streamed Chat Completions choice: its tool calls being assembled by index, held until it finishes."""

    def __init__(self, max_calls: int) -> None:
        self.parts: dict[int, dict[str, Any]] = {}
        self.legacy = False
        self.unreadable = False
        self.finished = False
        self.text_sent = False
        self.base: dict[str, Any] = {}
        """The last chunk's fields but `choices` (id, model, created...), for the chunks the gateway writes."""
        self.max_calls = max_calls

    def take(self, delta: dict[str, Any]) -> None:
        """Add one delta's tool-call parts (or legacy `function_call` part) to the calls held."""
        if isinstance(delta.get("content"), str) and delta["content"]:
            self.text_sent = True
        parts = delta.get("tool_calls")
        if delta.get("function_call") is not None:
            self.legacy = True
            parts = [{"index": 0, "function": delta["function_call"]}]
        if parts is None:
            return
        if not isinstance(parts, list):
            self.unreadable = True
            return
        for part in parts:
            position = part.get("index", 0) if isinstance(part, dict) else None
            if type(position) is not int or position < 0:
                self.unreadable = True
                continue
            call = self.parts.get(position)
            if call is None:
                if len(self.parts) >= self.max_calls:
                    raise Refused(problem(502, f"the upstream's answer has more than {self.max_calls} tool calls"))
                call = self.parts[position] = {
                    "id": None,
                    "type": "function",
                    "function": {"name": "", "arguments": ""},
                }
            if isinstance(part.get("id"), str) and part["id"]:
                call["id"] = part["id"]
            function = part.get("function") if isinstance(part.get("function"), dict) else {}
            if isinstance(function.get("name"), str):
                call["function"]["name"] += function["name"]
            if isinstance(function.get("arguments"), str):
                call["function"]["arguments"] += function["arguments"]

    def has_calls(self) -> bool:
        return bool(self.parts) or self.unreadable

    def calls(self) -> list[dict[str, Any]]:
        """The assembled calls, by index."""
        return [self.parts[i] for i in sorted(self.parts)]
