"""Untrusted text made safe for a terminal: no control codes, no bidirectional overrides,
no lone surrogates. (Rich markup is a separate matter: print the result with `markup=False`
or as a `rich.text.Text`.)"""

from __future__ import annotations

import re

__all__ = ["plain"]

# C0 and C1 controls (ESC, CSI, BEL, backspace, carriage return...), bidirectional overrides
# and lone surrogates: a terminal would act on them or the encoder would fail on them.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_ONE_LINE = re.compile(_UNSAFE.pattern[:-1] + "\n\t]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def plain(text: object, *, one_line: bool = False) -> str:
    """`text` safe to print: control characters, bidirectional overrides and lone surrogates
    shown as `\\xNN` / `\\uNNNN` escapes (newlines and tabs too with `one_line`). Rich markup
    is not touched here: print the result with `markup=False` or as `rich.text.Text`."""
    return (_UNSAFE_ONE_LINE if one_line else _UNSAFE).sub(_escape, str(text))
