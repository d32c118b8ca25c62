"""Deterministic grounding: where does each argument value come from? No LLM.

For every leaf value in the call's arguments, find it in the conversation (user turn k,
tool output j, the system prompt, earlier assistant text) or in the spec (a default or
an enum member). A value found nowhere gets no sources. The judge receives this as evidence.
"""

from __future__ import annotations

from typing import Any

from reflection.model import History, ToolCall, ToolSpec, ValueGrounding, ValueSource

__all__ = ["ground_call"]

_QUOTE_RADIUS = 40
_MAX_VALUES = 64  # bound the work on huge argument objects


def ground_call(call: ToolCall, history: History, spec: ToolSpec | None) -> tuple[ValueGrounding, ...]:
    """Provenance of every leaf argument value of `call` (in argument order)."""
    if not call.arguments:
        return ()
    leaves = list(_leaves(call.arguments, "$"))[:_MAX_VALUES]
    texts = _conversation_texts(history)
    out = []
    for path, value, schema_path in leaves:
        sources: list[ValueSource] = []
        for needle in _needles(value):
            for kind, index, message_index, text in texts:
                quote = _find(text, needle)
                if quote is not None:
                    sources.append(ValueSource(kind=kind, index=index, message_index=message_index, quote=quote))
            if sources:
                break
        if spec is not None:
            sources.extend(_spec_sources(spec.parameters, schema_path, value))
        out.append(ValueGrounding(path=path, value=value, sources=tuple(sources)))
    return tuple(out)


def _leaves(value: Any, path: str, schema_path: tuple[str, ...] = ()) -> Any:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}", (*schema_path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]", (*schema_path, "[]"))
    else:
        yield path, value, schema_path


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


def _conversation_texts(history: History) -> list[tuple[Any, int, int, str]]:
    counters = {"user": 0, "assistant": 0, "tool": 0, "system": 0}
    out = []
    for message_index, message in enumerate(history.messages):
        kind = message.role
        text = " ".join(message.content.split()).lower()
        if text:
            out.append((kind, counters[kind], message_index, text))
        counters[kind] += 1
    return out


def _find(text: str, needle: str) -> str | None:
    if needle[0].isalnum() and needle[-1].isalnum():
        # Whole-token match so "5" is not found inside "2025" and "cat" not inside "concatenate":
        # no word character or dot before, no word character after (the regex
        # `(?<![\w.])needle(?![\w])`, without compiling a pattern for every value).
        start = text.find(needle)
        while start >= 0:
            end = start + len(needle)
            if not (start and _word_or_dot(text[start - 1])) and not (end < len(text) and _word(text[end])):
                break
            start = text.find(needle, start + 1)
    else:
        start = text.find(needle)
    if start < 0:
        return None
    lo, hi = max(0, start - _QUOTE_RADIUS), min(len(text), start + len(needle) + _QUOTE_RADIUS)
    return ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")


def _word(char: str) -> bool:
    """Whether `char` is a regex word character (alphanumeric or underscore)."""
    return char.isalnum() or char == "_"


def _word_or_dot(char: str) -> bool:
    return char.isalnum() or char == "_" or char == "."


def _spec_sources(schema: dict[str, Any], schema_path: tuple[str, ...], value: Any) -> list[ValueSource]:
    node: Any = schema
    for step in schema_path:
        if not isinstance(node, dict):
            return []
        node = node.get("items") if step == "[]" else (node.get("properties") or {}).get(step)
    if not isinstance(node, dict):
        return []
    out = []
    if "default" in node and _same(node["default"], value):
        out.append(ValueSource(kind="default", quote=f"default: {node['default']!r}"))
    enum = node.get("enum")
    if isinstance(enum, list) and any(_same(member, value) for member in enum):
        out.append(ValueSource(kind="enum", quote=f"enum member {value!r}"))
    return out


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b or (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                             and not isinstance(a, bool) and not isinstance(b, bool) and a == b)
