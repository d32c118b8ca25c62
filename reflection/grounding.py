"""Deterministic grounding: where does each argument value come from? No LLM.

For every leaf value in the call's arguments, find it in the conversation (user turn k,
tool output j, the system prompt, earlier assistant text) or in the spec (a default or
an enum member). A value found nowhere gets no sources. The judge receives this as evidence.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import lru_cache
from typing import Any

from reflection.model import History, ToolCall, ToolSpec, ValueGrounding, ValueSource, _trusted, _trusted_from

__all__ = ["ground_call"]

_QUOTE_RADIUS = 40
_MAX_VALUES = 64  # bound the work on huge argument objects


def ground_call(call: ToolCall, history: History, spec: ToolSpec | None) -> tuple[ValueGrounding, ...]:
    """Provenance of every leaf argument value of `call` (in argument order, the first
    `_MAX_VALUES`)."""
    return _groundings(_ground_data(call, history, spec))


def _groundings(data: list[dict[str, Any]]) -> tuple[ValueGrounding, ...]:
    """The models of `_ground_data`'s plain data (the Python API's sink)."""
    # Every field of the data is already the exact type validation returns: no re-validation.
    return tuple(_trusted(ValueGrounding, path=item["path"], value=item["value"],
                          sources=tuple(_trusted_from(ValueSource, source) for source in item["sources"]))
                 for item in data)


def _ground_data(call: ToolCall, history: History, spec: ToolSpec | None) -> list[dict[str, Any]]:
    """`ground_call` as plain data, the core both sinks share: per value, `ValueGrounding`'s
    fields in order as `model_dump(mode="json")` gives them (`grounded` included), each
    source `ValueSource`'s. The CLI writes it as it is; `ground_call` builds the models."""
    if not call.arguments:
        return []
    conversation = _Conversation(history)
    schema = spec.parameters if spec is not None else None
    enums: dict[int, frozenset[Any]] = {}
    out = []
    for path, value, schema_path in _leaves(call.arguments):
        if type(value) is str:  # the usual leaf, with one text form
            needle = " ".join(value.split()).lower()
            sources = conversation.sources(needle) if needle else []
        else:
            sources = []
            for needle in _needles(value):
                sources = conversation.sources(needle)
                if sources:
                    break
        if schema is not None:
            sources.extend(_spec_sources(schema, schema_path, value, enums))
        out.append({"path": path, "value": value, "sources": sources, "grounded": bool(sources)})
    return out


def _leaves(arguments: dict[str, Any]) -> list[tuple[str, Any, tuple[str, ...]]]:
    """(JSON path, value, schema path) of the first `_MAX_VALUES` leaves, in argument order;
    iterative. Top-level scalars, the usual arguments, skip the stack."""
    out: list[tuple[str, Any, tuple[str, ...]]] = []
    for key, value in arguments.items():
        if not isinstance(value, (dict, list)):
            out.append((f"$.{key}", value, (key,)))
        else:
            stack: list[tuple[str, Any, tuple[str, ...]]] = [(f"$.{key}", value, (key,))]
            while stack and len(out) < _MAX_VALUES:
                path, node, schema_path = stack.pop()
                if isinstance(node, dict):
                    stack.extend((f"{path}.{k}", item, (*schema_path, k)) for k, item in reversed(node.items()))
                elif isinstance(node, list):
                    stack.extend((f"{path}[{i}]", node[i], (*schema_path, "[]")) for i in range(len(node) - 1, -1, -1))
                else:
                    out.append((path, node, schema_path))
        if len(out) >= _MAX_VALUES:
            return out
    return out


def _needles(value: Any) -> list[str]:
    """Text forms a value may take in a conversation, most specific first."""
    if value is None:
        return ["null", "none"]
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, float) and value.is_integer():
        return [repr(value), str(int(value))]
    if isinstance(value, (int, float)):
        return [str(value)]
    text = " ".join(str(value).split()).lower()
    return [text] if text else []


class _Conversation:
    """The conversation's texts, normalised (whitespace collapsed, lower case) and joined
    by newlines into one string, so finding a value in every message is one scan in C.

    A needle holds no newline (whitespace is collapsed in it too), so no match spans two
    messages, and a newline is neither a word character nor a dot: a message's edges
    bound a match as the whole string's edges would.
    """

    def __init__(self, history: History):
        counters = {"user": 0, "assistant": 0, "tool": 0, "system": 0}
        texts: list[str] = []
        self.messages: list[tuple[Any, int, int]] = []
        self.starts: list[int] = []
        offset = 0
        for message_index, message in enumerate(history.messages):
            kind = message.role
            text = " ".join(message.content.split()).lower()
            if text:
                self.messages.append((kind, counters[kind], message_index))
                self.starts.append(offset)
                texts.append(text)
                offset += len(text) + 1
            counters[kind] += 1
        self.text = "\n".join(texts)

    def sources(self, needle: str) -> list[dict[str, Any]]:
        """One source per message holding `needle` (its first occurrence there), in order."""
        text = self.text
        bounded = needle[0].isalnum() and needle[-1].isalnum()
        out: list[dict[str, Any]] = []
        position = 0
        misses = 0
        while True:
            start = text.find(needle, position)
            if start >= 0 and bounded and not _whole_token(text, start, start + len(needle)):
                misses += 1
                if misses <= _FIND_MISSES:
                    position = start + 1
                    continue
                # Many near misses ("5" in a long run of digits): let the regex engine skip them in C.
                match = _token_pattern(needle).search(text, start)
                start = match.start() if match else -1
            if start < 0:
                return out
            number = bisect_right(self.starts, start) - 1
            lo = self.starts[number]
            hi = self.starts[number + 1] - 1 if number + 1 < len(self.starts) else len(text)
            kind, index, message_index = self.messages[number]
            out.append({"kind": kind, "index": index, "message_index": message_index,
                        "quote": _quote(text, lo, hi, start, start + len(needle))})
            position = hi + 1  # on to the next message


# Candidates checked one by one before the compiled pattern takes over: most values are found,
# or missed, within a few; compiling a pattern per value costs more than that (about 20 us).
_FIND_MISSES = 8


def _whole_token(text: str, start: int, end: int) -> bool:
    """What `_token_pattern` asserts: no word character or dot before, no word character after."""
    if start:
        before = text[start - 1]
        if before.isalnum() or before in "_.":
            return False
    if end < len(text):
        after = text[end]
        if after.isalnum() or after == "_":
            return False
    return True


@lru_cache(maxsize=1024)  # agents repeat values across calls; bounded
def _token_pattern(needle: str) -> re.Pattern[str]:
    # Whole-token match so "5" is not found inside "2025" and "cat" not inside "concatenate":
    # no word character or dot before, no word character after.
    # The lookbehind follows the needle, so the pattern starts with a literal and the engine
    # finds candidates with its fast literal search instead of trying every position.
    literal = re.escape(needle)
    return re.compile(literal + r"(?<![\w.]" + literal + r")(?!\w)")


def _quote(text: str, lo: int, hi: int, start: int, end: int) -> str:
    """The match with `_QUOTE_RADIUS` characters around it, within its message text[lo:hi]."""
    left, right = max(lo, start - _QUOTE_RADIUS), min(hi, end + _QUOTE_RADIUS)
    return ("…" if left > lo else "") + text[left:right] + ("…" if right < hi else "")


def _spec_sources(schema: dict[str, Any], schema_path: tuple[str, ...], value: Any,
                  enums: dict[int, frozenset[Any]]) -> list[dict[str, Any]]:
    """Where the spec names `value`: as the default or an enum member (`enums` caches each
    enum's members by the list's identity, for the other values of the same call)."""
    node: Any = schema
    for step in schema_path:
        if not isinstance(node, dict):
            return []
        node = node.get("items") if step == "[]" else (node.get("properties") or {}).get(step)
    if not isinstance(node, dict):
        return []
    out = []
    if "default" in node and _same(node["default"], value):
        out.append({"kind": "default", "index": None, "message_index": None, "quote": f"default: {node['default']!r}"})
    enum = node.get("enum")
    if isinstance(enum, list):
        members = enums.get(id(enum))
        if members is None:
            members = enums[id(enum)] = frozenset(_key(m) for m in enum if isinstance(m, _SCALARS))
        if isinstance(value, _SCALARS) and _key(value) in members:
            out.append({"kind": "enum", "index": None, "message_index": None, "quote": f"enum member {value!r}"})
    return out


_SCALARS = (str, int, float, bool, type(None))


def _key(value: Any) -> tuple[Any, Any]:
    """Equal for two scalars exactly when `_same` holds: numbers by value (1 and 1.0),
    everything else, booleans included, by type and value."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "number", value
    return type(value), value


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b or (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                             and not isinstance(a, bool) and not isinstance(b, bool) and a == b)
