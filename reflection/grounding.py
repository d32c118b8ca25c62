"""Deterministic grounding: where does each argument value come from? No LLM.

For every leaf value in the call's arguments, find it in the conversation (user turn k,
tool output j, the system prompt, earlier assistant text) or in the spec (a default or
an enum member). A value found nowhere gets no sources. The judge receives this as evidence.

Text is found as whole tokens, case and spacing aside ("5" is not in "2025", "cat" not in
"concatenate"). A number is found as a number: where the conversation writes the same number,
in any form ("49.90" for 49.9, "$1,250.00" for 1250, "21.50" for 21.5, "3" for 3.0), and not
where it writes another one (49.9 in "49.95", 5 in "2025", "5.5" or "-5", 125 in "1,250.00").
A string stays text: "2134" is not in "zip 02134".

The work per row is near-linear in the conversation's size whatever the values: a value whose
occurrences are all inside longer tokens skips each such token whole, and past a few of them
the search moves to a copy of the conversation with every token boundary marked, built once
per row, where every occurrence found is a match.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from decimal import Decimal
from functools import lru_cache
from typing import Any, Literal, NamedTuple, TypedDict, overload

from reflection.model import History, ToolCall, ToolSpec, ValueGrounding
from reflection.results import GroundingData, SourceData

__all__ = ["ground", "ground_call"]

_QUOTE_RADIUS = 40
_MAX_VALUES = 64  # bound the work on huge argument objects


def ground_call(call: ToolCall, history: History, spec: ToolSpec | None) -> tuple[ValueGrounding, ...]:
    """Provenance of every leaf argument value of `call` (in argument order, the first
    `_MAX_VALUES`)."""
    return tuple(ValueGrounding.from_data(item) for item in ground(call, history, spec))


def ground(call: ToolCall, history: History, spec: ToolSpec | None) -> list[GroundingData]:
    """`ground_call` as plain data (`results.GroundingData`, one per value): what the CLI
    writes as it is, and what `ValueGrounding.from_data` builds the models of."""
    if not call.arguments:
        return []
    conversation = _Conversation(history)
    schema = spec.parameters if spec is not None else None
    enums: dict[int, frozenset[Any]] = {}
    out: list[GroundingData] = []
    for path, value, schema_path in _leaves(call.arguments):
        if type(value) is str:  # the usual leaf, with one text form
            needle = " ".join(value.split()).lower()
            sources = conversation.sources(needle) if needle else []
        else:
            found = conversation.number_sources(value) if type(value) in (int, float) else None
            if found is not None:
                sources = found
            else:  # null, booleans, and numbers too long to read as numbers: as text
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


class _Span(TypedDict):
    """Where a match is in the conversation (`_Conversation._marked_sources` with `spans`)."""

    start: int
    end: int


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
        self._found: dict[Any, list[SourceData]] = {}
        self._marked: tuple[str, list[int]] | None = None
        self._runs: tuple[list[int], list[int]] = ([], [])

    def sources(self, needle: str) -> list[SourceData]:
        """One source per message holding `needle` (its first occurrence there), in order."""
        known = self._found.get(needle)
        if known is not None:
            return list(known)
        text = self.text
        out: list[SourceData] = []
        position = 0
        if not (needle[0].isalnum() and needle[-1].isalnum()):  # no token edges to respect
            while (start := text.find(needle, position)) >= 0:
                position = self._add(out, start, start + len(needle))
        else:
            misses = 0
            while (start := text.find(needle, position)) >= 0:
                end = start + len(needle)
                if _whole_token(text, start, end):
                    position = self._add(out, start, end)
                    continue
                misses += 1
                if misses > _FIND_MISSES and _MARKS.isdisjoint(needle):  # many near misses ("5" in a table of numbers)
                    # (A needle holding a mark character is never looked for marked: marking
                    # makes those characters one, so "2\x002" would be found in "2\x032".)
                    out = self._marked_sources(_mark(needle), None)
                    break
                position = self._run_end(start)  # no match starts inside this token
        self._found[needle] = out
        return list(out)

    def number_sources(self, value: int | float) -> list[SourceData] | None:
        """One source per message writing the number `value` (its first occurrence there, in
        any of the forms `_number_forms` allows), in order; None when `value` is not read as
        a number (not finite, or too long: then it is looked for as text)."""
        forms = _number_forms(value)
        if forms is None:
            return None
        key = ("number", value)  # equal numbers (1 and 1.0) have the same forms
        known = self._found.get(key)
        if known is not None:
            return list(known)
        if len(forms) == 1:  # most numbers: every occurrence is found in message order
            single = self._number_sources(forms[0])
            self._found[key] = single
            return list(single)
        text = self.text
        found: dict[int, tuple[int, int]] = {}  # message number -> first (start, end)
        for form in forms:
            position = 0
            misses = 0
            while (start := text.find(form.literal, position)) >= 0:
                end = form.match(text, start)
                if end >= 0:
                    number = bisect_right(self.starts, start) - 1
                    if number not in found or start < found[number][0]:
                        found[number] = (start, end)
                    position = self._next_message(number)
                    continue
                misses += 1
                if misses > _FIND_MISSES:  # start over in the marked copy, for this form
                    for span in self._marked_sources(None, form.marked(), spans=True):
                        number = bisect_right(self.starts, span["start"]) - 1
                        if number not in found or span["start"] < found[number][0]:
                            found[number] = (span["start"], span["end"])
                    break
                position = self._run_end(start + 1)  # past the digits (or the minus and its digits)
        out: list[SourceData] = []
        for number in sorted(found) if len(found) > 1 else found:
            self._add(out, *found[number])
        self._found[key] = out
        return list(out)

    def _number_sources(self, form: _Form) -> list[SourceData]:
        """`number_sources` for a number with one form."""
        text = self.text
        out: list[SourceData] = []
        position = 0
        misses = 0
        while (start := text.find(form.literal, position)) >= 0:
            end = form.match(text, start)
            if end >= 0:
                position = self._add(out, start, end)
                continue
            misses += 1
            if misses > _FIND_MISSES:
                return self._marked_sources(None, form.marked())
            position = self._run_end(start + 1)
        return out

    def _add(self, out: list[SourceData], start: int, end: int) -> int:
        """Append the source of the match text[start:end]; the position where the next message starts."""
        number = bisect_right(self.starts, start) - 1
        lo = self.starts[number]
        hi = self.starts[number + 1] - 1 if number + 1 < len(self.starts) else len(self.text)
        kind, index, message_index = self.messages[number]
        out.append(
            {
                "kind": kind,
                "index": index,
                "message_index": message_index,
                "quote": _quote(self.text, lo, hi, start, end),
            }
        )
        return hi + 1

    def _next_message(self, number: int) -> int:
        return self.starts[number + 1] if number + 1 < len(self.starts) else len(self.text) + 1

    def _run_end(self, position: int) -> int:
        """The end of the token (run of word characters) holding `position`. Long tokens are
        remembered, so values that all stop inside one long token scan it once per row."""
        starts, ends = self._runs
        i = bisect_right(starts, position) - 1
        if i >= 0 and position < ends[i]:
            return ends[i]
        match = _NON_WORD.search(self.text, position)
        end = match.start() if match is not None else len(self.text)
        if end - position > _LONG_RUN:
            i = bisect_right(starts, position)
            starts.insert(i, position)
            ends.insert(i, end)
        return end

    @overload
    def _marked_sources(
        self, literal: str | None, pattern: re.Pattern[str] | None, spans: Literal[False] = False
    ) -> list[SourceData]: ...

    @overload
    def _marked_sources(
        self, literal: str | None, pattern: re.Pattern[str] | None, spans: Literal[True]
    ) -> list[_Span]: ...

    def _marked_sources(
        self, literal: str | None, pattern: re.Pattern[str] | None, spans: bool = False
    ) -> list[SourceData] | list[_Span]:
        """`sources` (or, with `spans`, {"start", "end"} of each match) found in the marked copy
        of the conversation, by `literal` (a marked needle) or `pattern` (a number's)."""
        marked, marked_starts = self._marked_text()
        out: list[Any] = []  # SourceData, or _Span with `spans`
        position = 0
        while True:
            if pattern is None:
                assert literal is not None
                hit = marked.find(literal, position)
                hit_end = hit + len(literal)
            else:
                match = pattern.search(marked, position)
                hit, hit_end = (match.start(), match.end()) if match is not None else (-1, -1)
            if hit < 0:
                return out
            number = bisect_right(marked_starts, hit) - 1
            first = marked_starts[number]
            start = self.starts[number] + hit - first - _markers(marked, first, hit)
            end = self.starts[number] + hit_end - first - _markers(marked, first, hit_end)
            if spans:
                out.append({"start": start, "end": end})
            else:
                self._add(out, start, end)
            if number + 1 >= len(marked_starts):
                return out
            position = marked_starts[number + 1]

    def _marked_text(self) -> tuple[str, list[int]]:
        """The conversation with every token boundary marked (`_mark`), built once per row, and
        where each message starts in it."""
        if self._marked is None:
            marked = _mark(self.text)
            starts = [0]
            position = marked.find("\n")
            while position >= 0:
                starts.append(position + 1)
                position = marked.find("\n", position + 1)
            self._marked = (marked, starts)
        return self._marked


# Candidates checked one by one before the marked copy takes over: most values are found, or
# missed, within a few; marking a long conversation costs more than that.
_FIND_MISSES = 8
_LONG_RUN = 256  # tokens longer than this are remembered by `_run_end`
_NON_WORD = re.compile(r"\W")
_BOUNDARY = re.compile(r"\b")
_CLEAN = str.maketrans({"\x00": "\x01", "\x03": "\x01"})
_MARKS = frozenset("\x00\x01\x03")
"""The characters marking makes one (`_CLEAN`): a needle holding one is looked for as it is."""


def _mark(text: str) -> str:
    """`text` with "\\x00" at every token boundary, but "\\x03" where a token starts right after
    a dot; the characters used as marks become "\\x01" (like them, neither a word character
    nor a dot). A needle marked the same way is found in a marked text exactly where it
    occurs as a whole token (`_whole_token`): the marks carry the edges into the text."""
    return _BOUNDARY.sub("\x00", text.translate(_CLEAN)).replace(".\x00", ".\x03")


def _markers(marked: str, lo: int, hi: int) -> int:
    return marked.count("\x00", lo, hi) + marked.count("\x03", lo, hi)


_MAX_DIGITS = 24
"""Digits a number may have to be found as a number (longer ones, ids mostly, are found as text)."""


class _Form(NamedTuple):
    """One way a number may be written (see `_number_forms`)."""

    literal: str
    """The text every occurrence starts with: the sign, the digits, the fraction's own digits."""
    negative: bool
    fraction: bool
    """Whether the literal holds a fraction (its trailing zeros may follow)."""
    zeros: bool
    """Whether zeros may follow: ".00" after a whole number, "0" after a fraction (not after an exponent)."""
    group: bool
    """Three digits before any fraction, which after "<digit>," are a thousands group."""

    def match(self, text: str, start: int) -> int:
        """Where the occurrence of `literal` at `start` ends, or -1 when it is not one."""
        end = start + len(self.literal)
        size = len(text)
        if start:
            before = text[start - 1]
            if before.isalnum() or before in "_.":
                return -1
            if not self.negative and before in _MINUS and (start == 1 or not _word_or_dot(text[start - 2])):
                return -1  # a minus sign of its own: a negative number
            thousands = self.group and before == "," and start >= 2 and text[start - 2].isdecimal()
        else:
            thousands = False
        if self.fraction:
            if thousands:
                return -1
            while end < size and text[end] == "0":
                end += 1
        elif self.zeros and not thousands and end + 1 < size and text[end] == "." and text[end + 1] == "0":
            end += 2
            while end < size and text[end] == "0":
                end += 1
        if end < size:
            after = text[end]
            if after.isalnum() or after == "_" or (after == "." and end + 1 < size and text[end + 1].isdecimal()):
                return -1
        return end

    def marked(self) -> re.Pattern[str]:
        """The pattern that finds an occurrence in the marked text (`_mark`), as `match` checks one."""
        return _marked_pattern(self)


_MINUS = "-\u2212"


def _word_or_dot(char: str) -> bool:
    return char.isalnum() or char in "_."


@lru_cache(maxsize=1024)  # agents repeat values across calls; bounded
def _number_forms(value: int | float) -> tuple[_Form, ...] | None:
    """How the number `value` may be written.

    Forms: the integer part plain or with thousands separators ("1,250"), the fraction with any
    trailing zeros ("49.90"), a minus sign for a negative number ("-" or "−"), and for a float
    written with an exponent, that text ("1e-05"). An occurrence is a whole number: not inside
    a longer token or after a dot ("5" in "2025" or "1.5"), not followed by a fraction ("5" in
    "5.5"); and a positive number is not one written with a minus ("-5"; "3-5" is a range).
    Digits after a comma are a number of their own too ("[1,2]", "[1,250]"), but not three
    of them before a fraction ("1,250.00" holds 1250 and 1, not 250)."""
    if type(value) is int:
        if value.bit_length() > 4 * _MAX_DIGITS:  # far too long to be read as a number
            return None
        digits = str(abs(value))
        whole, fraction, written, negative, zero = digits, "", "", value < 0, value == 0
    else:
        if not math.isfinite(value):
            return None
        written = repr(abs(value))
        text = format(Decimal(written), "f") if "e" in written else written
        whole, _, fraction = text.partition(".")
        fraction = fraction.rstrip("0")
        negative, zero = value < 0, value == 0
        if "e" not in written:
            written = ""
    whole = whole.lstrip("0") or "0"
    if len(whole) + len(fraction) > _MAX_DIGITS:
        return None
    tail = "." + fraction if fraction else ""
    bodies = [(whole + tail, bool(fraction), True, len(whole) == 3)]
    if len(whole) > 3:
        head = len(whole) % 3 or 3
        grouped = ",".join([whole[:head], *(whole[i : i + 3] for i in range(head, len(whole), 3))])
        bodies.append((grouped + tail, bool(fraction), True, False))
    if written:  # as serialisers write it: "1e-05", "1e+22"
        bodies += [
            (written, False, False, False),
            *([(written.replace("e+", "e"), False, False, False)] if "e+" in written else []),
        ]
    signs = ["", "-", "\u2212"] if zero else ["-", "\u2212"] if negative else [""]
    return tuple(
        _Form(sign + body, bool(sign), has_fraction, zeros, group and not sign)
        for sign in signs
        for body, has_fraction, zeros, group in bodies
    )


@lru_cache(maxsize=1024)
def _marked_pattern(form: _Form) -> re.Pattern[str]:
    sign = form.literal[0] if form.negative else ""
    body = form.literal[len(sign) :]
    mark = _mark(body)
    mark = sign + (mark[:-1] if form.fraction else mark)  # with a fraction, its zeros may follow
    escaped = re.escape(mark)
    if sign:
        behind = rf"(?<![\w.\x00\x03]{escaped})"
    else:
        behind = rf"(?<![^\w.\x00\x03][-\u2212]{escaped})(?<!^[-\u2212]{escaped})"
    comma = rf"(?<!\d\x00,{escaped})" if form.group else ""
    if not form.zeros:
        rest = ""
    elif form.fraction:
        rest, behind = "0*\x00", behind + comma
    else:
        rest = rf"(?:{comma}\.\x030+\x00)?"
    return re.compile(escaped + behind + rest + r"(?!\.[\x00\x03]?\d)")


def _whole_token(text: str, start: int, end: int) -> bool:
    """No word character or dot before the match, no word character after."""
    if start:
        before = text[start - 1]
        if before.isalnum() or before in "_.":
            return False
    if end < len(text):
        after = text[end]
        if after.isalnum() or after == "_":
            return False
    return True


def _quote(text: str, lo: int, hi: int, start: int, end: int) -> str:
    """The match with `_QUOTE_RADIUS` characters around it, within its message text[lo:hi]."""
    left, right = max(lo, start - _QUOTE_RADIUS), min(hi, end + _QUOTE_RADIUS)
    return ("…" if left > lo else "") + text[left:right] + ("…" if right < hi else "")


def _spec_sources(
    schema: dict[str, Any], schema_path: tuple[str, ...], value: Any, enums: dict[int, frozenset[Any]]
) -> list[SourceData]:
    """Where the spec names `value`: as the default or an enum member (`enums` caches each
    enum's members by the list's identity, for the other values of the same call)."""
    node: Any = schema
    for step in schema_path:
        if not isinstance(node, dict):
            return []
        if step == "[]":
            node = node.get("items")
        else:
            properties = node.get("properties")  # untrusted: `true`, a list, a string...
            node = properties.get(step) if isinstance(properties, dict) else None
    if not isinstance(node, dict):
        return []
    out: list[SourceData] = []
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
    return (type(a) is type(b) and a == b) or (
        isinstance(a, (int, float))
        and isinstance(b, (int, float))
        and not isinstance(a, bool)
        and not isinstance(b, bool)
        and a == b
    )
