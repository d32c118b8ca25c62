"""The gateway's OpenAI Responses API: `POST /v1/responses` forwarded to `{upstream.base_url}/responses`.

- Every `function_call` output item is gated with the request's `input` (and `instructions` as
  the system text) as history and its function `tools` as specs (hosted tools such as
  `web_search` are not specs and pass untouched), with the Chat Completions route's actions:
  `allow`, `modify` (the verified correction, same `call_id`), `reflect` (the model is asked
  again, once per round for every refused call together: the original `input`, the reply's
  output items, and one `function_call_output` per call saying what became of it, up to
  `gate.max_reflect_rounds` rounds), `deny` and `escalate` (the call is removed and a
  message item says so; escalated calls are listed under `reflection.escalated`).
- Output items the gateway cannot check (`custom_tool_call`, `local_shell_call`,
  `computer_call`, `mcp_approval_request`, any type it does not know) are removed and a note
  says so; text, reasoning and what the provider ran itself (`web_search_call`...) pass.
- The final output is the passed items in their order, then the gateway's note (one message
  item) if any, then the accepted calls. The response carries a `reflection` field and the
  `X-Reflection-*` headers; `usage` adds up every round.
- `stream: true`: text and other passed items' events flow as they come (their `output_index`
  renumbered); every call-like item's events are held until the response's terminal event
  (`response.completed`, `.incomplete` or `.failed`), then the calls are gated together and sent
  whole (`output_item.added`, one arguments delta, `arguments.done`, `output_item.done`) with
  consistent `output_index` and `sequence_number`; the terminal event carries the final output
  and the `reflection` field. An event the gateway cannot read, one for an item never announced,
  or a stream that ends without a terminal event ends with an `error` event: no call passes.
- After a re-ask the response carries the last re-ask's id: the upstream keeps the conversation
  under it, so a later `previous_response_id` continues from the turn the client got.
- `previous_response_id`: the upstream keeps the conversation; the gate gets it from memory.
  Every response this gateway relays is remembered (the request's input items and the output
  the client got, per client credentials, within `upstream.response_memory_bytes`, oldest
  forgotten first), and a request naming one is gated with that chain of turns before its own
  input. An id the gateway did not relay (or has forgotten, or another client's) gives no
  earlier turns: the call is gated with the request's own input only, so a value said only in
  an earlier turn counts as ungrounded.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from starlette.responses import Response

from reflection.formats import RESPONSES_PASSED
from reflection.reask import Said, Turn, report
from reflection.service._dialects import (
    UNREADABLE,
    Refused,
    ResponsesDialect,
    problem,
    read_reply,
    reply_bytes,
    reply_text,
    usage_sum,
)
from reflection.service._settle import Call, answered, settle, streamed
from reflection.service._sse import Event
from reflection.service._stream import named_event, nothing, relay

__all__ = ["DIALECT", "ResponseMemory", "answer"]

DIALECT = ResponsesDialect()
"""For the upstream path; requests get their own (with their earlier turns)."""

_MAX_CHAIN = 256
"""Earlier responses followed back through `previous_response_id`, at most."""
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_SNAPSHOTS = frozenset({"response.created", "response.in_progress", "response.queued"})


class ResponseMemory:
    """The Responses turns this gateway relayed, by (client, response id): each the request's
    input items, the output the client got and the `previous_response_id` it continued, within
    `max_bytes` (sizes as sent over the wire; the least recently used forgotten first)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.size = 0
        self._entries: collections.OrderedDict[tuple[bytes, str], tuple[Any, list[Any], int]] = (
            collections.OrderedDict()
        )

    def remember(self, owner: bytes, response_id: Any, previous: Any, items: list[Any], size: int) -> None:
        """Keep one turn (`items`: its input then its output) under `response_id`."""
        if not isinstance(response_id, str) or size > self.max_bytes:
            return
        key = (owner, response_id)
        old = self._entries.pop(key, None)
        if old is not None:
            self.size -= old[2]
        self._entries[key] = (previous, items, size)
        self.size += size
        while self.size > self.max_bytes:
            _, (_, _, dropped) = self._entries.popitem(last=False)
            self.size -= dropped

    def earlier(self, owner: bytes, response_id: Any) -> list[Any]:
        """The turns up to and including `response_id`, oldest first; [] for an id not kept."""
        chain: list[list[Any]] = []
        keys: list[tuple[bytes, str]] = []
        while isinstance(response_id, str) and len(chain) < _MAX_CHAIN:
            key = (owner, response_id)
            entry = self._entries.get(key)
            if entry is None or key in keys:
                break
            keys.append(key)
            chain.append(entry[1])
            response_id = entry[0]
        for key in reversed(keys):  # the turn named last is the most recently used: a chain loses its oldest first
            self._entries.move_to_end(key)
        return [item for items in reversed(chain) for item in items]


async def answer(call: Call, raw: bytes, memory: ResponseMemory) -> Response:
    """Answer one `POST /v1/responses` with tools (plain or streamed); `memory` holds the turns
    relayed before (read for `previous_response_id`, and this one added)."""
    dialect = ResponsesDialect(memory.earlier(call.owner, call.body.get("previous_response_id")))
    response = await call.forward(dialect, raw)
    if isinstance(response, Response):
        return response
    if call.body.get("stream"):
        return streamed(response, _relay(call, dialect, memory, response, len(raw)), "the response's terminal event")
    upstream_headers = response.headers
    content = await call.client.read(response)
    data = read_reply(content)
    if not isinstance(data, dict):
        return call.client.failed(
            "unreadable",
            502,
            "the upstream's answer is not a JSON object, so the tool calls in it could not be checked",
        )
    said = DIALECT.said(data)
    turns: list[Turn] = []
    if said.calls or said.removed:
        turns.append(await settle(call, dialect, said, call.budget()))
        _continue_from(data, turns[0])
        data["output"] = _final_output(_passed(said.turn), turns[0], data.get("id"))
    answer_ = answered(data, turns, upstream_headers)
    _remember(call, memory, dialect, data, len(raw) + len(answer_.body))
    return answer_


def _continue_from(response: dict[str, Any], turn: Turn) -> None:
    """After a re-ask the response takes the last re-ask's id: the upstream stored the conversation
    (the refused calls, what the gate said, the new calls) under it, so a `previous_response_id`
    naming it continues from the turn the client got, with the call ids the client holds."""
    if turn.reply_id is not None:
        response["id"] = turn.reply_id


def _passed(output: Any) -> list[Any]:
    return [item for item in output if isinstance(item, dict) and item.get("type") in RESPONSES_PASSED]


def _note_item(turn: Turn, response_id: Any) -> dict[str, Any] | None:
    if not turn.notes:
        return None
    return {
        "type": "message",
        "id": f"msg_reflection_{response_id}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "\n".join(turn.notes), "annotations": []}],
    }


def _final_output(passed: list[Any], turn: Turn, response_id: Any) -> list[Any]:
    """The passed items in order, the gateway's note, then the accepted calls."""
    notes = _note_item(turn, response_id)
    return [*passed, *([notes] if notes else []), *turn.calls]


def _remember(call: Call, memory: ResponseMemory, dialect: ResponsesDialect, data: dict[str, Any], size: int) -> None:
    output = data.get("output")
    if isinstance(output, list):
        memory.remember(
            call.owner,
            data.get("id"),
            call.body.get("previous_response_id"),
            [*dialect.conversation(call.body), *output],
            size,
        )


class _Held:
    """One streamed response: the passed items by their new index, and the call-like items held."""

    def __init__(self, max_calls: int) -> None:
        self.max_calls = max_calls
        self.index: dict[int, int] = {}
        """Upstream output_index -> the index the client sees, for passed items."""
        self.passed: list[Any] = []
        self.held: dict[int, dict[str, Any]] = {}
        """Upstream output_index -> the call-like item being assembled."""
        self.arguments: dict[int, list[str]] = {}
        """Upstream output_index -> a held call's arguments so far, in parts."""
        self.sequence = 0
        self.finished = False
        """Whether the response's terminal event came."""

    def stamp(self, data: dict[str, Any]) -> dict[str, Any]:
        data["sequence_number"] = self.sequence
        self.sequence += 1
        return data

    def said(self, final: dict[str, Any] | None) -> Said:
        """The held calls (by upstream order), with any function_call the terminal response lists
        that was never streamed (a call that was never announced is still a call: it is gated)."""
        for index, parts in self.arguments.items():
            self.held[index]["arguments"] = "".join(parts)
        self.arguments.clear()
        items = [self.held[i] for i in sorted(self.held)]
        known = {(item.get("id"), item.get("call_id")) for item in items}
        output = final.get("output") if isinstance(final, dict) else None
        for item in output if isinstance(output, list) else ():
            if (
                isinstance(item, dict)
                and item.get("type") == "function_call"
                and (item.get("id"), item.get("call_id")) not in known
            ):
                items.append(item)
        if len(items) > self.max_calls:
            raise Refused(problem(502, f"the upstream's answer has more than {self.max_calls} tool calls"))
        calls = [item for item in items if item.get("type") == "function_call"]
        removed = [str(item.get("type")) for item in items if item.get("type") != "function_call"]
        return Said(calls, [*self.passed, *calls], None, removed)


def _output_index(data: dict[str, Any]) -> int:
    index = data.get("output_index")
    if type(index) is not int or index < 0:
        raise Refused(problem(502, "the upstream sent an event whose output_index is not a non-negative integer"))
    return index


def _relay(
    call: Call, dialect: ResponsesDialect, memory: ResponseMemory, response: aiohttp.ClientResponse, request_size: int
) -> AsyncIterator[bytes]:
    """The upstream's events, with every call-like item held until the response ends, then gated."""
    state = _Held(call.max_calls)

    def each(event: Event) -> AsyncIterator[bytes]:
        return _relay_event(call, dialect, memory, state, event, request_size)

    def unfinished() -> str | None:
        if not state.finished and (state.held or state.passed):
            return "the upstream's stream ended before the response did; its tool calls were not passed on"
        return None

    return relay(
        response,
        call.deadline,
        call.client.config.max_response_bytes,
        each=each,
        end=nothing,
        unfinished=unfinished,
        refused=lambda error: _error(state, error["error"]),
        broken=lambda why: _error(state, {"message": why, "type": "reflection_gateway_error", "code": None}),
    )


def _error(state: _Held, error: dict[str, Any]) -> bytes:
    """An `error` event as the Responses API sends one, with the error object the SDKs raise on."""
    data = state.stamp(
        {
            "type": "error",
            "code": error.get("code"),
            "message": error.get("message"),
            "param": error.get("param"),
            "error": error,
        }
    )
    return named_event(data)


async def _relay_event(
    call: Call, dialect: ResponsesDialect, memory: ResponseMemory, state: _Held, event: Event, request_size: int
) -> AsyncIterator[bytes]:
    """What the client gets for one upstream event (the terminal one marks `state.finished`)."""
    if event.data is None:
        yield event.encode()  # comments, retry hints
        return
    if event.data.strip() == "[DONE]":
        yield event.encode("[DONE]")
        return
    data = read_reply(event.data.encode())
    if data is UNREADABLE or not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise Refused(
            problem(
                502,
                "the upstream sent an event that is not a Responses event, so the tool calls in "
                "it could not be checked",
            )
        )
    kind = data["type"]
    if kind in _TERMINAL:
        state.finished = True
        async for out in _finish(call, dialect, memory, state, data, request_size):
            yield out
        return
    if kind in _SNAPSHOTS and isinstance(data.get("response"), dict):
        data["response"] = {**data["response"], "output": list(state.passed)}  # calls only ever come whole
    if "output_index" not in data:
        yield named_event(state.stamp(data))
        return
    index = _output_index(data)
    if kind == "response.output_item.added":
        item = data.get("item")
        if not isinstance(item, dict):
            raise Refused(problem(502, "the upstream announced an output item that is not an object"))
        if index in state.index or index in state.held:
            raise Refused(problem(502, "the upstream announced one output_index twice"))
        if item.get("type") not in RESPONSES_PASSED:
            if len(state.held) >= state.max_calls:
                raise Refused(problem(502, f"the upstream's answer has more than {state.max_calls} tool calls"))
            state.held[index] = (
                {**item, "arguments": item.get("arguments") or ""}
                if item.get("type") == "function_call"
                else dict(item)
            )
            return
        state.index[index] = len(state.passed)
        state.passed.append(item)
    if index in state.held:
        _hold(state, index, kind, data)
        return
    if index not in state.index:
        raise Refused(problem(502, "the upstream sent an event for an output item it never announced"))
    data["output_index"] = state.index[index]
    if kind == "response.output_item.done" and isinstance(data.get("item"), dict):
        state.passed[state.index[index]] = data["item"]
    yield named_event(state.stamp(data))


def _hold(state: _Held, index: int, kind: str, data: dict[str, Any]) -> None:
    """Add one event of a held item to it (a call is assembled from its deltas, in parts joined at
    the end; `.done` events carry the whole text and the whole item, which win)."""
    item = state.held[index]
    if item.get("type") != "function_call":
        return  # removed whole at the end, whatever it streams
    if kind == "response.function_call_arguments.delta" and isinstance(data.get("delta"), str):
        state.arguments.setdefault(index, [item.get("arguments") or ""]).append(data["delta"])
    elif kind == "response.function_call_arguments.done" and isinstance(data.get("arguments"), str):
        state.arguments[index] = [data["arguments"]]
    elif (
        kind == "response.output_item.done"
        and isinstance(data.get("item"), dict)
        and data["item"].get("type") == "function_call"
    ):
        item.clear()
        item.update(data["item"])
        state.arguments.pop(index, None)


async def _finish(
    call: Call, dialect: ResponsesDialect, memory: ResponseMemory, state: _Held, data: dict[str, Any], request_size: int
) -> AsyncIterator[bytes]:
    """Gate the held calls, send what comes of them whole, then the terminal event with the final output."""
    final = given if isinstance(given := data.get("response"), dict) else {}
    said = state.said(final)
    turn = Turn()
    if said.calls or said.removed:
        turn = await settle(call, dialect, said, call.budget())
    final = dict(final)
    _continue_from(final, turn)
    notes = _note_item(turn, final.get("id"))
    position = len(state.passed)
    for item in [notes] if notes else []:
        for out in _message_events(state, item, position):
            yield out
        position += 1
    for item in turn.calls:
        for out in _call_events(state, item, position):
            yield out
        position += 1
    output = _final_output(state.passed, turn, final.get("id"))
    response = {**final, "output": output}
    if turn.usage and isinstance(final.get("usage"), dict):
        response["usage"] = usage_sum(final["usage"], turn.usage)
    response["reflection"] = report([turn])
    data["response"] = response
    _remember(call, memory, dialect, response, request_size + len(reply_bytes(output)))
    yield named_event(state.stamp(data))


def _message_events(state: _Held, item: dict[str, Any], index: int) -> list[bytes]:
    part = item["content"][0]
    text = part["text"]
    common = {"item_id": item["id"], "output_index": index, "content_index": 0}
    return [
        named_event(state.stamp(data))
        for data in (
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "status": "in_progress", "content": []},
            },
            {"type": "response.content_part.added", **common, "part": {**part, "text": ""}},
            {"type": "response.output_text.delta", **common, "delta": text, "logprobs": []},
            {"type": "response.output_text.done", **common, "text": text, "logprobs": []},
            {"type": "response.content_part.done", **common, "part": part},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        )
    ]


def _call_events(state: _Held, item: dict[str, Any], index: int) -> list[bytes]:
    arguments = item.get("arguments") if isinstance(item.get("arguments"), str) else reply_text(item.get("arguments"))
    common = {"item_id": item.get("id"), "output_index": index}
    return [
        named_event(state.stamp(data))
        for data in (
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "arguments": "", "status": "in_progress"},
            },
            {"type": "response.function_call_arguments.delta", **common, "delta": arguments},
            {
                "type": "response.function_call_arguments.done",
                **common,
                "name": item.get("name"),
                "arguments": arguments,
            },
            {"type": "response.output_item.done", "output_index": index, "item": item},
        )
    ]
