"""Untrusted text made safe for where it goes: one helper per concern.

Conversation text, tool names and descriptions, argument keys and values, ids, judge and
upstream replies are data everywhere. Which helper to use for which destination:

- **Feedback and notes a model reads** (the gate's feedback, re-ask turns, hook messages):
  `plain_line` for prose (control, format and separator characters blanked, whitespace
  collapsed, length bounded) and `quoted` for a name or value (the same, as a JSON string
  literal, so "SYSTEM: ..." in a tool name stays inside its quotes).
- **Logs, error messages and the terminal**: `terminal_safe` (control codes, bidirectional
  overrides and lone surrogates shown as `\\xNN` / `\\uNNNN` escapes; `one_line` for one log
  line). Rich markup is a separate matter: print the result with `markup=False` or as a
  `rich.text.Text`.
- **Prompts to the judge**: `prompt_safe` on the JSON text inside the `<data>` delimiters.
- **HTML**: `shorten`, then the HTML writer's own escaping (`html.escape`); markup is never
  built from untrusted text.
- **Text that must be written as UTF-8** (JSON out, files, errors): `printable` (lone
  surrogates as `\\udXXX` text).
- **Anything shown at a bounded length**: `shorten` (one function with a limit; the ellipsis
  counts towards the limit unless `past_limit`).

This is the base layer: it imports nothing from `reflection` (JSON strings are written with
the standard library, which escapes them exactly as `reflection._json` does), so every module,
`errors` and `_json` included, may use it.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any, Literal

__all__ = [
    "CONTROL_CHARACTERS",
    "ELLIPSIS",
    "FEEDBACK_LIMIT",
    "LONE_SURROGATE",
    "NAME_LIMIT",
    "has_lone_surrogate",
    "plain_line",
    "printable",
    "prompt_safe",
    "quoted",
    "shorten",
    "terminal_safe",
]

ELLIPSIS = "…"
FEEDBACK_LIMIT = 300
"""Characters of one plain line of feedback."""
NAME_LIMIT = 120
"""Characters of one quoted name in feedback."""

CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
"""C0 and C1 controls, zero-width and bidirectional marks, line and paragraph separators,
bidirectional embeddings, overrides and isolates, lone surrogates: a narrower set than
`plain_line` blanks by default (`plain_line(text, only=CONTROL_CHARACTERS)`)."""

# What a terminal would act on or an encoder fail on: C0 and C1 controls (ESC, CSI, BEL,
# backspace, carriage return...), bidirectional overrides and lone surrogates.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_ONE_LINE = re.compile(_UNSAFE.pattern[:-1] + "\n\t]")
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""A lone surrogate: a code point JSON can escape but UTF-8 cannot carry."""


def shorten(text: str, limit: int, *, ellipsis: str = ELLIPSIS, past_limit: bool = False) -> str:
    """`text` as it is when it has at most `limit` characters, else cut and ended with
    `ellipsis`: at most `limit` characters in all, or with `past_limit` the first `limit`
    characters and then the ellipsis."""
    if len(text) <= limit:
        return text
    return text[:limit] + ellipsis if past_limit else text[: limit - len(ellipsis)] + ellipsis


def plain_line(text: str, limit: int = FEEDBACK_LIMIT, *, only: re.Pattern[str] | None = None) -> str:
    """Untrusted text as one plain line: control, format and separator characters (escape
    sequences, bidi overrides, zero-width marks, newlines, lone surrogates; with `only`, just
    the characters it matches) blanked, whitespace collapsed, at most `limit` characters."""
    if only is None:
        cleaned = "".join(" " if unicodedata.category(ch)[0] in "CZ" else ch for ch in text)
    else:
        cleaned = only.sub(" ", text)
    return shorten(" ".join(cleaned.split()), limit)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: object, *, one_line: bool = False, collapse: bool = False, limit: int | None = None) -> str:
    """`str(text)` safe to print: control characters, bidirectional overrides and lone
    surrogates shown as `\\xNN` / `\\uNNNN` escapes (newlines and tabs too with `one_line`;
    with `collapse`, whitespace runs, newlines included, become one space first), then
    shortened to `limit` characters if given. Rich markup is not touched here: print the
    result with `markup=False` or as `rich.text.Text`."""
    text = " ".join(str(text).split()) if collapse else str(text)
    safe = (_UNSAFE_ONE_LINE if one_line or collapse else _UNSAFE).sub(_escape, text)
    return safe if limit is None else shorten(safe, limit)


def quoted(
    value: Any,
    limit: int = NAME_LIMIT,
    *,
    style: Literal["plain", "escaped", "json"] = "plain",
    empty: str = "(no name)",
) -> str:
    """`str(value)` (a model- or tool-supplied name or value) as one bounded JSON string
    literal: it reads as data in feedback, notes and logs, never as an instruction.

    `style` says what becomes of unusual characters: "plain" blanks them as `plain_line` does
    (at most `limit` characters inside the quotes; `empty` stands for nothing left);
    "escaped" collapses whitespace and shows the rest as `terminal_safe` escapes (at most
    `limit` characters inside the quotes); "json" keeps the text as written (its first
    `limit` characters and an ellipsis), in JSON escapes, made `terminal_safe`."""
    text = str(value)
    if style == "plain":
        return json.dumps(plain_line(text, limit) or empty, ensure_ascii=False)
    if style == "escaped":
        return json.dumps(terminal_safe(text, collapse=True, limit=limit) or empty, ensure_ascii=False)
    text = printable(shorten(text, limit, past_limit=True) or empty)
    return terminal_safe(json.dumps(text, ensure_ascii=False), one_line=True)


def has_lone_surrogate(text: str) -> bool:
    """Whether `text` holds a lone surrogate (it cannot then be written as UTF-8)."""
    # isascii() is O(1) in CPython (a flag on the string): the usual case costs nothing.
    return not text.isascii() and LONE_SURROGATE.search(text) is not None


def printable(text: str) -> str:
    """`text` with lone surrogates escaped as `\\udXXX`, so it can be written as UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8") if has_lone_surrogate(text) else text


def prompt_safe(text: str) -> str:
    """JSON text escaped for a prompt's `<data>` block: `&`, `<` and `>` as JSON's `\\u0026`,
    `\\u003c` and `\\u003e`, so the data still reads the same and cannot close its delimiters."""
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
