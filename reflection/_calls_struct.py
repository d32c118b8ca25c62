"""The members `formats.count_calls_text` reads a row's calls from, as a msgspec Struct.

Its own module, left out of the modules the wheel compiles with mypyc (`hatch_build.py`): mypyc
gives a compiled class the annotation `type` for a union, and msgspec decodes by the class's
annotations, so every body would fail to decode and count 0 (msgspec issue 194, mypyc issue 1098).
"""

from __future__ import annotations

import msgspec

_Member = list[msgspec.Raw] | dict[str, msgspec.Raw] | str | int | float | bool | None | msgspec.UnsetType


class Calls(msgspec.Struct):
    """Where a body's calls are (the rest of it is skipped unread): each member's items or members
    left as JSON text; `UNSET` when absent."""

    call: _Member = msgspec.UNSET
    tool_calls: _Member = msgspec.UNSET


CALLS = msgspec.json.Decoder(Calls)
