"""Strict JSON parsing and the JSON-like check used at the public API boundary."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Container
from typing import Any

import msgspec
import orjson

# orjson reads integers beyond 64 bits as floats; such text goes to the exact stdlib parser.
_LONG_DIGITS = re.compile(rb"\d{19,}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")

_SCALARS = (str, int, bool, type(None))


_DECODE = msgspec.json.Decoder().decode


def parse_json(text: str | bytes | msgspec.Raw) -> Any:
    """Parse RFC 8259 JSON. NaN, Infinity and trailing data are errors, and integers of
    any size stay exact.

    Raises ValueError with the parser's message.
    """
    try:
        return _DECODE(text)  # strict, and exact for big integers: the fast path
    except Exception:  # noqa: BLE001, S110 - not returned: orjson below re-reads it to name the error and where
        pass
    if isinstance(text, msgspec.Raw):  # a member of a row (parse_json_keeping); orjson reads bytes
        text = bytes(text)
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(str(exc)) from None
    raw = text.encode() if isinstance(text, str) else text
    if _LONG_DIGITS.search(raw):
        return json.loads(raw, parse_constant=_reject_constant)
    return value


_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])


def parse_json_keeping(text: bytes, keep: Container[str]) -> Any:
    """`parse_json(text)`, except that the members of a top-level object named in `keep`
    stay unparsed, as their JSON text (bytes).

    A dataset line repeats the same tool list row after row; left as bytes it is a cheap
    cache key (see `formats.normalize_tools`) instead of a kilobyte parsed every time.
    Anything msgspec does not split as an object goes to `parse_json`, so the result and
    the error messages are exactly `parse_json`'s.
    """
    try:
        members = _MEMBERS.decode(text)
    except Exception:  # noqa: BLE001 - not JSON, not an object, too deep: parse_json raises or parses it
        return parse_json(text)
    try:
        return {key: bytes(raw) if key in keep else parse_json(raw) for key, raw in members.items()}
    except ValueError:  # a member orjson rejects: report it where it is in the whole text
        return parse_json(text)


def canonical_bytes(value: Any) -> bytes:
    """Key-order-independent bytes for a JSON value, for content-keyed caches."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # integers beyond 64 bits
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def dumps(value: Any) -> str:
    """Compact JSON text (exact for any integer size)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


FINITE = 1
"""`require_json_like` flag: the value holds no NaN or infinity."""
PLAIN = 2
"""`require_json_like` flag: exact dict (str keys), list, tuple, str, int, float, bool or None
at every level, no subclass: what pydantic would store unchanged (dicts shallow-copied)."""
_SCAN_DEPTH = 200


def _scan(value: Any, depth: int = 0) -> int:
    """`PLAIN`, with `FINITE` unless a NaN or infinity hides in it, when `value` is plainly
    JSON-like; 0 when only the exact checks can tell (subclasses, other objects, very deep).

    One walk answers what the API boundary asks, so a call is not walked twice.
    """
    kind = type(value)
    if kind is dict:
        for key in value:
            if type(key) is not str:
                return 0
        value = value.values()
    elif not (kind is list or kind is tuple):
        if kind is str or kind is int or kind is bool or value is None:
            return PLAIN | FINITE
        if kind is float:
            return PLAIN if value - value else PLAIN | FINITE  # inf - inf and NaN - NaN are NaN
        return 0
    found = PLAIN | FINITE
    for item in value:
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        if kind is float:
            if item - item:
                found = PLAIN
            continue
        if depth >= _SCAN_DEPTH:
            return 0
        state = _scan(item, depth + 1)
        if not state:
            return 0
        found &= state
    return found


def non_json_location(value: Any, path: str = "$") -> str | None:
    """Path and type of the first part of `value` that is not JSON-like, else None.

    JSON-like means dict with str keys, list/tuple, str, int, float, bool or None.
    Non-finite floats are JSON-like here (they are data errors, reported by checks).
    """
    if isinstance(value, _SCALARS) or isinstance(value, float):
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} (key {key!r} of type {type(key).__name__})"
            found = non_json_location(item, f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = non_json_location(item, f"{path}[{i}]")
            if found:
                return found
        return None
    return f"{path} ({type(value).__name__})"


def require_json_like(value: Any, argument: str) -> int:
    """Raise TypeError naming `argument` when `value` is not JSON-like (API misuse).

    Returns flags, so callers that need more than this answer walk the value once:
    `FINITE` when it holds no NaN or infinity (what `has_non_finite` tells), `PLAIN` when
    every part of it has an exact JSON type (see `PLAIN`).
    """
    state = _scan(value)
    if state:
        return state
    where = non_json_location(value)
    if where is not None:
        raise TypeError(f"{argument}: expected a JSON-like value, found a non-JSON object at {where}")
    return 0 if has_non_finite(value) else FINITE


def has_non_finite(value: Any) -> bool:
    """True when a NaN or infinity hides anywhere in `value`."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (list, tuple)):
        return False
    for item in value:  # a loop, not any(<generator>): one frame per level of nesting
        if has_non_finite(item):
            return True
    return False


def json_type(value: Any) -> str:
    """The JSON Schema type name of a Python JSON value (`integer` for ints, `number` for floats)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__

