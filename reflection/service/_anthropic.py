"""The gateway's Anthropic Messages API: `POST /v1/messages` forwarded to `{upstream.anthropic_base_url}/messages`.

- Every `tool_use` block is gated with the request's `messages` (and `system`) as history and its
  `tools` (`input_schema`) as specs (Anthropic's own tools without a schema, such as
  `web_search_20250305` or `bash_20250124`, are not specs: a `tool_use` naming one is checked as
  a call to a tool the specs do not hold). `allow`, `modify` (the verified correction, same id),
  `reflect` (the model is asked again, once per round for every refused call together: the
  original messages, the reply's content as the assistant turn, and a user turn with one
  `tool_result` per call saying what became of it, up to `gate.max_reflect_rounds`), `deny`
  and `escalate` as on the Chat Completions route.
- Content blocks the gateway cannot check (a type it does not know) are removed and a note says
  so; text, thinking and what the provider ran itself (`server_tool_use`, its results) pass.
- The final content is the passed blocks in order, the gateway's note (one text block) if any,
  then the accepted `tool_use` blocks; `stop_reason` `tool_use` becomes `end_turn` when no call
  is left. The message carries a `reflection` field and the `X-Reflection-*` headers; `usage`
  adds up every round.
- `stream: true`: text (and other passed blocks) flow as they come, their `index` renumbered;
  every `tool_use` block is held, its `input_json_delta` parts buffered, until `message_delta`
  (the message's stop), then the calls are gated together and sent whole
  (`content_block_start`, one `input_json_delta`, `content_block_stop`) with consistent block
  indexes; `message_delta` carries the `reflection` field. An event the gateway cannot read,
  one for a block never started, or a stream that ends before the message's stop ends with an
  `error` event: no call passes.
- Keys: Anthropic's key header is `x-api-key`, which the service also accepts as its own key
  (LiteLLM sends it there). A client's `x-api-key` is forwarded unless it was the service key;
  with service keys configured, Anthropic clients send the service key in `x-reflection-api-key`
  and their Anthropic key in `x-api-key`, or the gateway holds the Anthropic key
  (`upstream.anthropic_api_key_env`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from starlette.responses import Response

from reflection.formats import ANTHROPIC_PASSED
from reflection.reask import Said, Turn, report
from reflection.service._dialects import (
    ANTHROPIC,
    UNREADABLE,
    Refused,
    problem,
    read_reply,
    reply_text,
    usage_sum,
)
from reflection.service._settle import Call, answered, settle, streamed
from reflection.service._sse import Event
from reflection.service._stream import named_event, nothing, relay

__all__ = ["DIALECT", "answer"]

DIALECT = ANTHROPIC


async def answer(call: Call, raw: bytes) -> Response:
    """Answer one `POST /v1/messages` with tools (plain or streamed)."""
    response = await call.forward(DIALECT, raw)
    if isinstance(response, Response):
        return response
    if call.body.get("stream"):
        return streamed(response, _relay(call, response), "message_delta")
    upstream_headers = response.headers
    data = read_reply(await call.client.read(response))
    if not isinstance(data, dict):
        return call.client.failed(
            "unreadable",
            502,
            "the upstream's answer is not a JSON object, so the tool calls in it could not be checked",
        )
    said = DIALECT.said(data)
    turns: list[Turn] = []
    if said.calls or said.removed:
        turn = await settle(call, DIALECT, said, call.budget())
        turns.append(turn)
        data["content"] = _final_content(_passed(said.turn), turn)
        if data.get("stop_reason") == "tool_use" and not turn.calls:
            data["stop_reason"] = "end_turn"
    return answered(data, turns, upstream_headers)


def _passed(content: Any) -> list[Any]:
    return [block for block in content if isinstance(block, dict) and block.get("type") in ANTHROPIC_PASSED]


def _final_content(passed: list[Any], turn: Turn) -> list[Any]:
    """The passed blocks in order, the gateway's note, then the accepted calls."""
    notes = [{"type": "text", "text": "\n".join(turn.notes)}] if turn.notes else []
    return [*passed, *notes, *turn.calls]


class _Held:
    """One streamed message: passed blocks by their new index, the blocks held (tool_use being
    assembled from its JSON parts, and blocks the gateway cannot check)."""

    def __init__(self, max_calls: int) -> None:
        self.max_calls = max_calls
        self.index: dict[int, int] = {}
        """Upstream block index -> the index the client sees, for passed blocks."""
        self.passed: list[dict[str, Any]] = []
        self.held: dict[int, dict[str, Any]] = {}
        self.parts: dict[int, list[str]] = {}
        """Block index -> its `input_json_delta` parts (held and passed blocks alike)."""
        self.texts: dict[tuple[int, str], list[str]] = {}
        """(block index, "text" or "thinking") -> its text parts."""
        self.start_usage: dict[str, Any] = {}
        self.stopped = False

    def said(self) -> Said:
        blocks = [self.held[i] for i in sorted(self.held)]
        calls = [block for block in blocks if block.get("type") == "tool_use"]
        removed = [str(block.get("type")) for block in blocks if block.get("type") != "tool_use"]
        return Said(calls, [*self.passed, *calls], None, removed)


def _index(data: dict[str, Any]) -> int:
    index = data.get("index")
    if type(index) is not int or index < 0:
        raise Refused(problem(502, "the upstream sent an event whose block index is not a non-negative integer"))
    return index


def _error(error: dict[str, Any]) -> bytes:
    """An `error` event as Anthropic sends one (the SDK raises on it)."""
    return named_event(
        {
            "type": "error",
            "error": {
                "type": error.get("type") or "api_error",
                "message": str(error.get("message") or "the stream could not go on"),
            },
        }
    )


def _relay(call: Call, response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The upstream's events, with every tool_use block held until the message stops, then gated."""
    state = _Held(call.max_calls)

    def each(event: Event) -> AsyncIterator[bytes]:
        return _relay_event(call, state, event)

    def unfinished() -> str | None:
        if not state.stopped and (state.held or state.passed):
            return "the upstream's stream ended before the message stopped; its tool calls were not passed on"
        return None

    return relay(
        response,
        call.deadline,
        call.client.config.max_response_bytes,
        each=each,
        end=nothing,
        unfinished=unfinished,
        refused=lambda error: _error(error["error"]),
        broken=lambda why: _error({"type": "api_error", "message": why}),
    )


async def _relay_event(call: Call, state: _Held, event: Event) -> AsyncIterator[bytes]:
    if event.data is None:
        yield event.encode()  # comments
        return
    data = read_reply(event.data.encode())
    if data is UNREADABLE or not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise Refused(
            problem(
                502,
                "the upstream sent an event that is not a Messages event, so the tool calls in it could not be checked",
            )
        )
    kind = data["type"]
    if kind == "message_start":
        message = given if isinstance(given := data.get("message"), dict) else {}
        state.start_usage = given if isinstance(given := message.get("usage"), dict) else {}
        data["message"] = {**message, "content": []}  # calls only ever come whole
        yield named_event(data)
        return
    if kind == "message_delta" or (kind == "message_stop" and not state.stopped):
        if not state.stopped:
            state.stopped = True
            async for out in _finish(call, state, data if kind == "message_delta" else None):
                yield out
        if kind == "message_delta":
            return
    if kind in ("message_stop", "ping", "error") or not kind.startswith("content_block_"):
        yield named_event(data)
        return
    if state.stopped:
        raise Refused(problem(502, "the upstream sent a content block after the message stopped"))
    index = _index(data)
    if kind == "content_block_start":
        block = data.get("content_block")
        if not isinstance(block, dict):
            raise Refused(problem(502, "the upstream started a content block that is not an object"))
        if index in state.index or index in state.held:
            raise Refused(problem(502, "the upstream started one content block index twice"))
        if block.get("type") not in ANTHROPIC_PASSED:
            if len(state.held) >= state.max_calls:
                raise Refused(problem(502, f"the upstream's answer has more than {state.max_calls} tool calls"))
            state.held[index] = dict(block)
            return
        state.index[index] = len(state.passed)
        state.passed.append(dict(block))
    elif index not in state.index and index not in state.held:
        raise Refused(problem(502, "the upstream sent an event for a content block it never started"))
    delta = given if isinstance(given := data.get("delta"), dict) else {}
    if kind == "content_block_delta":
        _take(state, index, delta)
    elif kind == "content_block_stop":
        _settle_block(state, index)
    if index in state.held:
        return
    data["index"] = state.index[index]
    yield named_event(data)


_TEXT_DELTAS = {"text_delta": "text", "thinking_delta": "thinking"}


def _take(state: _Held, index: int, delta: dict[str, Any]) -> None:
    """Keep one delta's part for the block it belongs to (joined when the block stops: the block
    whole is what a re-ask shows the model as its turn)."""
    kind = delta.get("type")
    if kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
        state.parts.setdefault(index, []).append(delta["partial_json"])
    elif kind in _TEXT_DELTAS and isinstance(delta.get(_TEXT_DELTAS[kind]), str):
        state.texts.setdefault((index, _TEXT_DELTAS[kind]), []).append(delta[_TEXT_DELTAS[kind]])
    elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
        (state.held.get(index) or state.passed[state.index[index]])["signature"] = delta["signature"]


def _settle_block(state: _Held, index: int) -> None:
    """Join a block's parts into it: its text, its thinking, its input (JSON that is not an object
    stays text, which the gate refuses as unreadable arguments)."""
    block = state.held.get(index) or state.passed[state.index[index]]
    for field in _TEXT_DELTAS.values():
        parts = state.texts.pop((index, field), None)
        if parts is not None:
            block[field] = (block.get(field) or "") + "".join(parts)
    if index in state.parts:
        text = "".join(state.parts.pop(index))
        parsed = read_reply(text.encode()) if text.strip() else block.get("input", {})
        block["input"] = parsed if isinstance(parsed, dict) else text


async def _finish(call: Call, state: _Held, data: dict[str, Any] | None) -> AsyncIterator[bytes]:
    """Gate the held calls, send what comes of them whole, then the message_delta with the report."""
    for index in {*state.parts, *(index for index, _ in state.texts)}:  # blocks never stopped: their parts as they are
        _settle_block(state, index)
    said = state.said()
    turn = Turn()
    if said.calls or said.removed:
        turn = await settle(call, DIALECT, said, call.budget())
    position = len(state.passed)
    if turn.notes:
        text = "\n".join(turn.notes)
        yield named_event(
            {"type": "content_block_start", "index": position, "content_block": {"type": "text", "text": ""}}
        )
        yield named_event(
            {"type": "content_block_delta", "index": position, "delta": {"type": "text_delta", "text": text}}
        )
        yield named_event({"type": "content_block_stop", "index": position})
        position += 1
    for block in turn.calls:
        arguments = block.get("input")
        yield named_event({"type": "content_block_start", "index": position, "content_block": {**block, "input": {}}})
        yield named_event(
            {
                "type": "content_block_delta",
                "index": position,
                "delta": {"type": "input_json_delta", "partial_json": reply_text(arguments)},
            }
        )
        yield named_event({"type": "content_block_stop", "index": position})
        position += 1
    if data is None:
        data = {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use" if turn.calls else "end_turn", "stop_sequence": None},
            "usage": {},
        }
    delta = given if isinstance(given := data.get("delta"), dict) else {}
    if delta.get("stop_reason") == "tool_use" and not turn.calls:
        data["delta"] = {**delta, "stop_reason": "end_turn"}
    if turn.usage:
        usage = given if isinstance(given := data.get("usage"), dict) else {}
        data["usage"] = usage_sum({**state.start_usage, **usage}, turn.usage)
    data["reflection"] = report([turn])
    yield named_event(data)
