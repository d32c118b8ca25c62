"""What the gateway needs to know about each API it speaks, and nothing about transport.

The gateway's settling of a reply's calls (gate them, write back what was accepted, re-ask the
model about what was refused, bounded rounds) is one loop for every API. What differs is the
shape: where the calls sit in a reply, which history and specs the gate reads, how a re-ask
request shows the model its turn and what became of each call, and how a call is written back
in its own shape. A `Dialect` answers exactly those questions for one API (Chat Completions,
the Responses API, Anthropic Messages). Reading calls from a reply and writing a corrected call
back are `reflection.formats`' (`message_calls`, `output_calls`, `content_calls`,
`openai_corrected_call`, `corrected_call`): a dialect says which of them its API uses.

Also here: the small helpers the gateway's modules share (refusals, lenient JSON as the
clients' readers accept it, usage sums).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from reflection import formats
from reflection._json import dumps, parse_json
from reflection.errors import Refused
from reflection.formats import (
    ANTHROPIC_PASSED,
    LEGACY_CALL,
    RESPONSES_PASSED,
    call_identity,
    content_calls,
    corrected_call,
    openai_corrected_call,
    output_calls,
)
from reflection.reask import Said, Turn

__all__ = [
    "ANTHROPIC",
    "CHAT",
    "UNREADABLE",
    "AnthropicDialect",
    "ChatDialect",
    "Dialect",
    "Refused",
    "ResponsesDialect",
    "first_message",
    "input_items",
    "lenient",
    "lenient_dumps",
    "message_calls",
    "problem",
    "read_reply",
    "reply_bytes",
    "reply_text",
    "usage_sum",
]


def problem(status: int, detail: str) -> Response:
    """The gateway's own error answer."""
    return Response(dumps({"detail": detail}), status_code=status, media_type="application/json")


UNREADABLE: Any = object()


def lenient(raw: bytes) -> Any:
    """JSON as Python's reader (and so the OpenAI SDK and most servers) reads it: NaN, Infinity
    and lone surrogates accepted. `UNREADABLE` when even that fails."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return UNREADABLE


def read_reply(content: bytes) -> Any:
    """An upstream answer's JSON, strict first, then as the clients' readers accept it."""
    try:
        return parse_json(content)
    except ValueError:
        return lenient(content)


def lenient_dumps(value: Any) -> str:
    """JSON text for what `lenient` read (NaN, lone surrogates written back as they came)."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


def reply_bytes(data: Any) -> bytes:
    """JSON bytes; a reply read leniently (NaN, a lone surrogate) is written back the way it came."""
    try:
        return dumps(data).encode()
    except (TypeError, ValueError, UnicodeEncodeError):
        return lenient_dumps(data).encode()


def reply_text(data: Any) -> str:
    """`reply_bytes` as text."""
    return reply_bytes(data).decode()


def usage_sum(first: Any, more: list[Any]) -> Any:
    """`first` (a usage object) with every integer top-level field of `more` added."""
    if not more:
        return first
    out = dict(first) if isinstance(first, dict) else {}
    for usage in more:
        if not isinstance(usage, dict):
            continue
        for key, value in usage.items():
            if type(value) is int and type(out.get(key, 0)) is int:
                out[key] = out.get(key, 0) + value
    return out


class Dialect:
    """One API's shapes. Subclasses answer each question; instances may carry per-request state
    (the Responses API's earlier turns)."""

    path = ""
    """The upstream path, after the base URL."""

    def specs(self, body: dict[str, Any]) -> Any:
        """The tool specs the gate checks against (JSON text, as the request had them)."""
        return body.get("tools")

    def conversation(self, body: dict[str, Any]) -> list[Any]:
        """The request's conversation in the API's shape: what a re-ask extends."""
        raise NotImplementedError

    def history(self, body: dict[str, Any], conversation: list[Any]) -> list[Any]:
        """What the gate reads as the conversation (system text first where the API keeps it apart)."""
        return conversation

    def said(self, reply: dict[str, Any]) -> Said:
        """The calls and the turn of a (re-ask's) reply. Raises `Refused` for one that cannot be read
        (the number of calls is bounded by the caller)."""
        raise NotImplementedError

    def extend(
        self, conversation: list[Any], said: Said, calls: list[Any], results: list[str], round_: int
    ) -> tuple[list[Any], list[Any]]:
        """The conversation with the model's turn and one result per call added (what the model
        reads on a re-ask), and `calls` as written there (ids filled in)."""
        raise NotImplementedError

    def reask(self, body: dict[str, Any], conversation: list[Any]) -> dict[str, Any]:
        """The re-ask request: the client's request, not streamed, with `conversation`."""
        raise NotImplementedError

    def corrected(self, corrected: Any, original: Any) -> Any:
        """The gate's verified correction in the call's own shape, keeping the original's ids."""
        return corrected_call(corrected, original)

    def call_id(self, call: Any) -> Any:
        """The id a result refers the call by."""
        return call.get("id") if isinstance(call, dict) else None

    def with_id(self, call: dict[str, Any], call_id: str) -> dict[str, Any]:
        """`call` under another id (one id per call in a final reply)."""
        return {**call, "id": call_id}

    def identity(self, call: Any) -> bytes:
        """What makes two calls the same call (`formats.call_identity`)."""
        return call_identity(call)


def _reask_body(body: dict[str, Any], key: str, conversation: list[Any]) -> dict[str, Any]:
    again = {k: v for k, v in body.items() if k not in ("stream", "stream_options", "n")}
    again[key] = conversation
    if isinstance(body.get("tools"), (bytes, str)):  # kept as JSON text for the gate's spec cache
        again["tools"] = parse_json(body["tools"])
    return again


# --- Chat Completions -------------------------------------------------------------------------


class ChatDialect(Dialect):
    """Chat Completions: `message.tool_calls` (and a legacy `function_call`), `messages`, `tool` results."""

    path = "/chat/completions"

    def conversation(self, body: dict[str, Any]) -> list[Any]:
        messages = body.get("messages")
        return list(messages) if isinstance(messages, list) else []

    def said(self, reply: dict[str, Any]) -> Said:
        message = first_message(reply)
        calls = message_calls(message) if message is not None else None
        text = message.get("content") if message is not None else None
        return Said(calls or [], message, text if isinstance(text, str) else None)

    def extend(
        self, conversation: list[Any], said: Said, calls: list[Any], results: list[str], round_: int
    ) -> tuple[list[Any], list[Any]]:
        wire = [_wire(call, f"call_r{round_}_{i}") for i, call in enumerate(calls)]
        return [
            *conversation,
            {"role": "assistant", "content": None, "tool_calls": wire},
            *(
                {"role": "tool", "tool_call_id": call["id"], "content": text}
                for call, text in zip(wire, results, strict=True)
            ),
        ], wire

    def reask(self, body: dict[str, Any], conversation: list[Any]) -> dict[str, Any]:
        return _reask_body(body, "messages", conversation)

    def corrected(self, corrected: Any, original: Any) -> dict[str, Any]:
        """The corrected call in the OpenAI shape, with the original call's id and arguments as JSON text."""
        return openai_corrected_call(corrected, original)

    def write(self, choice: dict[str, Any], message: dict[str, Any], turn: Turn) -> None:
        """Put a settled turn into the reply's message: kept calls, and text for removed ones."""
        legacy = [c for c in turn.calls if isinstance(c, dict) and c.get(LEGACY_CALL)]
        calls = [c for c in turn.calls if not (isinstance(c, dict) and c.get(LEGACY_CALL))]
        message.pop("function_call", None)
        if legacy:
            function = legacy[0].get("function", {})
            message["function_call"] = {"name": function.get("name"), "arguments": function.get("arguments")}
        if turn.notes:
            content = message.get("content")
            message["content"] = "\n\n".join([content, "\n".join(turn.notes)] if content else ["\n".join(turn.notes)])
        if calls:
            message["tool_calls"] = calls
        else:
            message.pop("tool_calls", None)
            if choice.get("finish_reason") in ("tool_calls", "function_call") and not legacy:
                choice["finish_reason"] = "stop"


def message_calls(message: dict[str, Any]) -> list[Any] | None:
    """The calls a Chat Completions message carries (a legacy `function_call` as one call), or None
    (`formats.message_calls`); `Refused` when they cannot be read."""
    try:
        return formats.message_calls(message)
    except ValueError:
        raise Refused(
            problem(502, "the upstream's message has tool_calls that are not a list, so they could not be checked")
        ) from None


def first_message(reply: dict[str, Any]) -> dict[str, Any] | None:
    """The first choice's message of a Chat Completions reply."""
    try:
        message = reply["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    return message if isinstance(message, dict) else None


def _wire(call: Any, fallback_id: str) -> dict[str, Any]:
    """A call as the upstream reads it in a re-ask's history: OpenAI shape, with an id."""
    out = {k: v for k, v in call.items() if k != LEGACY_CALL} if isinstance(call, dict) else {"type": "function"}
    if not isinstance(out.get("id"), str) or not out["id"]:
        out["id"] = fallback_id
    return out


# --- the Responses API ------------------------------------------------------------------------


class ResponsesDialect(Dialect):
    """The Responses API: `function_call` output items, `input` (plus `instructions` and, for a
    `previous_response_id` this gateway relayed, the earlier turns) as history, and
    `function_call_output` items as results."""

    path = "/responses"

    def __init__(self, earlier: list[Any] | None = None):
        self.earlier = earlier or []
        """The turns before this request (a `previous_response_id` chain), oldest first."""

    def conversation(self, body: dict[str, Any]) -> list[Any]:
        return input_items(body.get("input"))

    def history(self, body: dict[str, Any], conversation: list[Any]) -> list[Any]:
        instructions = body.get("instructions")
        system = [{"role": "system", "content": instructions}] if isinstance(instructions, str) and instructions else []
        return [*system, *self.earlier, *conversation]

    def said(self, reply: dict[str, Any]) -> Said:
        output = reply.get("output")
        if not isinstance(output, list):
            raise Refused(
                problem(
                    502, "the upstream's response has no `output` list, so the tool calls in it could not be checked"
                )
            )
        calls, removed, text = output_calls(output)
        return Said(calls, output, text, removed)

    def extend(
        self, conversation: list[Any], said: Said, calls: list[Any], results: list[str], round_: int
    ) -> tuple[list[Any], list[Any]]:
        wired = {id(call): _wired_item(call, f"call_r{round_}_{i}") for i, call in enumerate(calls)}
        turn = [
            wired.get(id(item), item)
            for item in said.turn
            if isinstance(item, dict) and item.get("type") in RESPONSES_PASSED | {"function_call"}
        ]
        written = [wired[id(call)] for call in calls]
        outputs = [
            {"type": "function_call_output", "call_id": call["call_id"], "output": text}
            for call, text in zip(written, results, strict=True)
        ]
        return [*conversation, *turn, *outputs], written

    def reask(self, body: dict[str, Any], conversation: list[Any]) -> dict[str, Any]:
        return _reask_body(body, "input", conversation)

    def call_id(self, call: Any) -> Any:
        return call.get("call_id") if isinstance(call, dict) else None

    def with_id(self, call: dict[str, Any], call_id: str) -> dict[str, Any]:
        return {**call, "call_id": call_id, "id": f"fc_{call_id}"}


def input_items(raw: Any) -> list[Any]:
    """A Responses request's `input` as a list of items (a string is one user message)."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    return list(raw) if isinstance(raw, list) else []


def _wired_item(call: Any, fallback_id: str) -> dict[str, Any]:
    out = dict(call) if isinstance(call, dict) else {"type": "function_call"}
    if not isinstance(out.get("call_id"), str) or not out["call_id"]:
        out["call_id"] = fallback_id
    return out


# --- Anthropic Messages -----------------------------------------------------------------------


class AnthropicDialect(Dialect):
    """Anthropic Messages: `tool_use` blocks, `messages` (plus `system`) as history, `tool_result` blocks."""

    path = "/messages"

    def conversation(self, body: dict[str, Any]) -> list[Any]:
        messages = body.get("messages")
        return list(messages) if isinstance(messages, list) else []

    def history(self, body: dict[str, Any], conversation: list[Any]) -> list[Any]:
        system = body.get("system")
        return [{"role": "system", "content": system}, *conversation] if system else conversation

    def said(self, reply: dict[str, Any]) -> Said:
        content = reply.get("content")
        if not isinstance(content, list):
            raise Refused(
                problem(
                    502, "the upstream's message has no `content` list, so the tool calls in it could not be checked"
                )
            )
        calls, removed, text = content_calls(content)
        return Said(calls, content, text, removed)

    def extend(
        self, conversation: list[Any], said: Said, calls: list[Any], results: list[str], round_: int
    ) -> tuple[list[Any], list[Any]]:
        wired = {id(call): _wired_block(call, f"toolu_r{round_}_{i}") for i, call in enumerate(calls)}
        turn = [
            wired.get(id(block), block)
            for block in said.turn
            if isinstance(block, dict) and block.get("type") in ANTHROPIC_PASSED | {"tool_use"}
        ]
        written = [wired[id(call)] for call in calls]
        results_blocks = [
            {"type": "tool_result", "tool_use_id": call["id"], "content": text}
            for call, text in zip(written, results, strict=True)
        ]
        return [
            *conversation,
            {"role": "assistant", "content": turn},
            {"role": "user", "content": results_blocks},
        ], written

    def reask(self, body: dict[str, Any], conversation: list[Any]) -> dict[str, Any]:
        return _reask_body(body, "messages", conversation)


def _wired_block(call: Any, fallback_id: str) -> dict[str, Any]:
    out = dict(call) if isinstance(call, dict) else {"type": "tool_use"}
    if not isinstance(out.get("id"), str) or not out["id"]:
        out["id"] = fallback_id
    if not isinstance(out.get("input"), dict):  # the API takes only an object; the gate refused the call anyway
        out["input"] = {}
    return out


CHAT = ChatDialect()
ANTHROPIC = AnthropicDialect()
