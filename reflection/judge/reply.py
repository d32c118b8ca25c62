"""Reading a judge's Chat Completions message into the JSON object it answers with.

Real judges wrap their answer: prose before and after it, a ```json fence anywhere, a
`<think>` block first (reasoning models), the reasoning in a `reasoning_content` /
`reasoning` field beside `content` (ignored: only `content` is the answer), the object
encoded once more as a JSON string, or the object as a tool call's `arguments` with
`content: null`. Near-JSON (single quotes, Python's `True`/`None`, trailing commas) is
repaired with `json_repair`, a library made for LLM output, never by our own regexes.

A reply that is already one strict JSON object costs one msgspec decode, as before.
Everything here raises `UnreadableReply` (a ValueError) with a message in our own words:
it may be quoted back to the judge, so it never carries text from the reply.
"""

from __future__ import annotations

import re
from typing import Any

from reflection._json import dumps, parse_json
from reflection.errors import UnreadableReply

__all__ = ["RepairedObject", "UnreadableReply", "read_json", "reply_text"]

_THINK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.S | re.I)
_THINK_END = re.compile(r"</(?:think|thinking|reasoning)>", re.I)
_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_-]*[ \t]*\r?\n?(.*?)```", re.S)
_MAX_OBJECTS = 16  # objects looked at in prose; bounds the work on a pathological reply


class RepairedObject(dict):
    """A reply object json_repair made from near-JSON, so readers can say so."""


def reply_text(message: Any) -> str:
    """The text of a completion's `message` that carries the answer: `content`, or a tool
    call's `arguments` when `content` is empty or holds no object. A refusal and an empty
    reply raise."""
    if not isinstance(message, dict):
        raise UnreadableReply("the judge returned no message")
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal.strip():
        raise UnreadableReply("the judge refused to answer")
    content = message.get("content")
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        content = "".join(
            part.get("text") or "" for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    if (
        isinstance(content, str)
        and content
        and not content.isspace()
        and ("{" in content or "tool_calls" not in message)
    ):
        return content
    arguments = _tool_arguments(message)  # the answer as a tool call, beside no content or a remark
    if arguments is not None:
        return arguments
    if isinstance(content, str) and content and not content.isspace():
        return content
    if message.get("reasoning_content") or message.get("reasoning"):
        raise UnreadableReply("the judge sent only its reasoning, with an empty answer")
    raise UnreadableReply("the judge sent an empty reply")


def _tool_arguments(message: dict[str, Any]) -> str | None:
    calls = message.get("tool_calls")
    function = None
    if isinstance(calls, list) and calls and isinstance(calls[0], dict):
        function = calls[0].get("function")
    elif isinstance(message.get("function_call"), dict):  # the legacy single-function form
        function = message["function_call"]
    arguments = function.get("arguments") if isinstance(function, dict) else None
    if isinstance(arguments, dict):  # some servers send the object itself
        return dumps(arguments)
    return arguments if isinstance(arguments, str) and arguments.strip() else None


def read_json(text: str) -> Any:
    """The one JSON object in a reply's text, wherever it sits in it. Raises UnreadableReply."""
    try:
        value = parse_json(text)  # a strict reply: the fast path
    except ValueError:
        return _read_wrapped(text, encodings=0)
    if isinstance(value, dict):
        return value
    return _unwrap_string(value, encodings=0)


def _unwrap_string(value: Any, encodings: int) -> Any:
    # A JSON object sent as a JSON string ("{\"a\": 1}"): read the string once more.
    if isinstance(value, str) and encodings < 2:
        return _read_wrapped(value, encodings + 1)
    raise UnreadableReply("the reply must be a JSON object, not another JSON value")


def _read_wrapped(text: str, encodings: int) -> Any:
    text = _THINK.sub("", text)
    ends = list(_THINK_END.finditer(text))  # the last closing tag, whose opening the server cut off
    if ends:
        text = text[ends[-1].end() :]
    fenced = [block for block in _FENCE.findall(text) if block.strip()]
    found: list[Any] = []
    for part in fenced or [text]:
        found.extend(_objects_in(part.strip(), encodings))
    if not found:
        raise UnreadableReply("the reply holds no JSON object")
    first = found[0]
    if any(other != first for other in found[1:]):
        raise UnreadableReply("the reply holds several different JSON objects; send exactly one")
    return first


def _objects_in(text: str, encodings: int) -> list[Any]:
    """The JSON objects in one piece of text: itself, or the outermost objects standing in
    prose, strict ones first, else near-JSON ones repaired."""
    if not text:
        return []
    try:
        value = parse_json(text)
    except ValueError:
        pass
    else:
        return [value] if isinstance(value, dict) else [_unwrap_string(value, encodings)]
    regions = _outermost_objects(text)
    strict = []
    for region in regions:
        try:
            value = parse_json(region)
        except ValueError:
            continue
        strict.append(value)
    if strict:
        return strict
    from json_repair import repair_json  # imported here: only near-JSON replies need it

    repaired = [repair_json(region, return_objects=True) for region in regions]
    return [RepairedObject(value) for value in repaired if isinstance(value, dict) and value]


def _outermost_objects(text: str) -> list[str]:
    """The balanced `{...}` stretches of `text` not nested in another (braces inside
    double-quoted strings do not count). An object still open at the end is a cut-off
    reply: said so, never completed by a guess."""
    regions: list[str] = []
    depth = 0
    start = 0
    in_string = escaped = False
    for position, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = depth > 0  # a quote in prose opens nothing
        elif char == "{":
            if depth == 0:
                start = position
            depth += 1
        elif char == "}" and depth:
            depth -= 1
            if depth == 0:
                regions.append(text[start : position + 1])
                if len(regions) >= _MAX_OBJECTS:
                    break
    if depth:
        raise UnreadableReply("the reply's JSON object is cut off before its end")
    return regions
