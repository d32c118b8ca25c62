"""Strict JSON parsing and the JSON-like check used at the public API boundary."""

from __future__ import annotations

import json
import math
import re
from collections import OrderedDict
from collections.abc import Callable, Container
from typing import Any

import msgspec
import orjson

from reflection._text import LONE_SURROGATE, has_lone_surrogate, printable
from reflection.errors import JSONTooDeep

# orjson reads integers beyond 64 bits as floats; such text goes to the exact stdlib parser.
_LONG_DIGITS = re.compile(rb"\d{19,}")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_INT_LIMIT = re.compile(r"value has (\d+) digits")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_SCALARS = (str, int, bool, type(None))


_DECODE = msgspec.json.Decoder().decode


def _too_deep() -> JSONTooDeep:
    return JSONTooDeep(f"nesting deeper than {MAX_DEPTH} levels (the most that is checked)")


def parse_json(text: str | bytes | msgspec.Raw) -> Any:
    """Parse RFC 8259 JSON. NaN, Infinity, lone surrogates and trailing data are errors,
    and integers stay exact up to `MAX_INT_DIGITS` digits.

    Raises ValueError with the parser's message (`JSONTooDeep` for text nesting deeper
    than the parsers go). Values nesting up to that depth are returned: what is checked
    is bounded by `MAX_DEPTH` where it is read (see `SOUND`).
    """
    try:
        return _DECODE(text)  # strict, and exact for big integers: the fast path
    except Exception:  # noqa: BLE001 - not returned: orjson below re-reads it to name the error and where
        pass
    if isinstance(text, msgspec.Raw):  # a member of a row (parse_json_keeping); orjson reads bytes
        text = bytes(text)
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):
            raise _too_deep() from None
        if str(exc).startswith("number is infinity") and _LONG_DIGITS.search(raw):
            return _exact(raw, str(exc))  # an integer too long for a double, or a real overflow
        raise ValueError(str(exc)) from None
    if _LONG_DIGITS.search(raw):
        return _exact(raw, None)
    return value


def _exact(raw: bytes, orjson_error: str | None) -> Any:
    """`raw` read by the standard library, whose integers are exact (orjson's are doubles)."""
    try:
        value = json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:  # the C scanner's own guard; orjson goes deeper
        raise _too_deep() from None
    except ValueError as exc:
        digits = _INT_LIMIT.search(str(exc))
        if digits:
            raise ValueError(
                f"an integer with {digits.group(1)} digits: more than the {MAX_INT_DIGITS} digits that can be read"
            ) from None
        raise ValueError(orjson_error or str(exc)) from None
    if orjson_error is not None and has_non_finite(value):
        raise ValueError(orjson_error)  # a float out of range (1e400), not a long integer
    if orjson_error is not None and _SURROGATE_ESCAPE.search(raw) and _has_bad_text(value):
        raise ValueError("a lone surrogate escape, which is not valid Unicode text")
    return value


_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])


def parse_json_keeping(text: bytes, keep: Container[str], deep: Container[str] = ()) -> Any:
    """`parse_json(text)`, except that the members of a top-level object named in `keep`
    stay unparsed, as their JSON text (bytes), and so do the members named in `deep` that
    nest deeper than the JSON parsers go (the code that reads them then reports it, and the
    rest of the object is still read).

    A dataset line repeats the same tool list row after row; left as bytes it is a cheap
    cache key (see `formats.normalize_tools`) instead of a kilobyte parsed every time.
    Anything msgspec does not split as an object goes to `parse_json`, so the result and
    the error messages are exactly `parse_json`'s.
    """
    try:
        members: dict[str, Any] = _MEMBERS.decode(text)
    except Exception:  # noqa: BLE001 - not JSON, not an object, too deep: parse_json raises or parses it
        try:
            return parse_json(text)
        except JSONTooDeep:
            if not deep:
                raise
            members = _split_members(text)
    try:
        return {key: bytes(raw) if key in keep else parse_json(raw) for key, raw in members.items()}
    except JSONTooDeep:
        if not deep:
            raise
    except ValueError:  # a member orjson rejects: report it where it is in the whole text
        return parse_json(text)
    try:  # a member too deep for the parsers: once more, keeping those named in `deep` as text
        return {
            key: bytes(raw) if key in keep or (key in deep and _too_deep_member(raw)) else parse_json(raw)
            for key, raw in members.items()
        }
    except ValueError:
        return parse_json(text)


_ITEMS = msgspec.json.Decoder(list[msgspec.Raw])


def array_items(text: bytes) -> list[bytes] | None:
    """The items of the JSON array `text`, each as its own JSON text, or None when `text` is not
    an array msgspec splits (not JSON, another value, too deep): `parse_json` then says what it is.

    Splitting checks the syntax without building the items, so a tool list whose specs were
    seen before, in other lists, costs no more than the split (see `formats.normalize_tools`)."""
    try:
        return [bytes(item) for item in _ITEMS.decode(text)]
    except Exception:  # noqa: BLE001 - any text that does not split: the caller parses it as a whole
        return None


def _too_deep_member(raw: Any) -> bool:
    try:
        parse_json(raw)
    except JSONTooDeep:
        return True
    except ValueError:
        return False
    return False


_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[][{},:]', re.DOTALL)


def _split_members(text: bytes) -> dict[str, bytes]:
    """The members of the JSON object `text` as their text, for objects nesting deeper than
    msgspec splits: one iterative pass over the tokens that matter. Raises `JSONTooDeep`
    when `text` is not an object split this way (each member is still parsed on its own)."""
    members: dict[str, bytes] = {}
    depth = 0
    key: bytes | None = None
    start = -1
    for match in _TOKENS.finditer(text):
        first = match.group()[0]
        if first == 0x22:  # '"': a key when one is expected at the top level
            if depth == 1 and key is None:
                key = match.group()
        elif first in b"[{":
            if depth == 0 and (first != 0x7B or text[: match.start()].strip()):
                raise _too_deep()
            depth += 1
        elif first in b"]}":
            depth -= 1
            if depth == 0:
                if key is not None:
                    members[_key(key)] = text[start : match.start()]
                if text[match.end() :].strip():
                    raise _too_deep()
                return members
        elif depth == 1:
            if first == 0x3A and key is not None and start < 0:  # ':'
                start = match.end()
            elif first == 0x2C and key is not None and start >= 0:  # ','
                members[_key(key)] = text[start : match.start()]
                key, start = None, -1
            else:
                raise _too_deep()
    raise _too_deep()


def _key(token: bytes) -> str:
    key = parse_json(token)
    if not isinstance(key, str):
        raise _too_deep()
    return key


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


def dumps_line(value: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """`dumps(value)` and a newline, as UTF-8 bytes, written once; `default` turns objects
    neither JSON writer knows into ones it does (as their own `default` does)."""
    try:
        return orjson.dumps(value, default=default, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        return (json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=default) + "\n").encode()


FINITE = 1
"""`require_json_like` flag: the value holds no NaN or infinity."""
PLAIN = 2
"""`require_json_like` flag: exact dict (str keys), list, tuple, str, int, float, bool or None
at every level, no subclass: what pydantic would store unchanged (dicts shallow-copied)."""
SOUND = 4
"""`require_json_like` flag: the value can be checked and written back out: it nests at most
`MAX_DEPTH` levels, its text is valid Unicode (no lone surrogate, in keys or values) and its
integers have at most `MAX_INT_DIGITS` digits. `value_problem` says what is wrong otherwise."""

MAX_DEPTH = 100
"""How deep a value the library checks: arguments, a history message or a tool spec nesting
containers (objects, arrays) deeper than this are reported as bad input, not checked. Every
walk over such a value is iterative, so no depth ever reaches a recursion limit."""
MAX_INT_DIGITS = 4300
"""Python's limit on converting integers to and from text (`sys.get_int_max_str_digits`)."""

_BIG = 10**MAX_INT_DIGITS  # an integer at or beyond this has more than MAX_INT_DIGITS digits
_NEG_BIG = -_BIG  # a constant: negating _BIG on every test would copy 1,800 bytes each time
_NEAR = 8  # levels `_scan` walks by recursion (fastest for the usual shallow call); deeper ones iteratively


def _scan(value: Any, depth: int = 1) -> int:
    """`PLAIN`, with `FINITE` and `SOUND` unless a NaN or infinity, or something that makes
    the value unsound, hides in it, when `value` is plainly JSON-like; 0 when only the exact
    checks can tell (subclasses, other objects). `depth`: levels down (1 for the value itself).

    One walk answers what the API boundary asks, so a call is not walked twice.
    """
    kind = type(value)
    found = PLAIN | FINITE | SOUND
    if kind is dict:
        for key in value:
            if type(key) is not str or not key.isascii():  # isascii() is O(1) in CPython
                if type(key) is not str:
                    return 0
                if LONE_SURROGATE.search(key):
                    found = PLAIN | FINITE
        value = value.values()
    elif not (kind is list or kind is tuple):
        if kind is str:
            return found if value.isascii() or not LONE_SURROGATE.search(value) else PLAIN | FINITE
        if kind is int:
            return found if _NEG_BIG < value < _BIG else PLAIN | FINITE
        if kind is bool or value is None:
            return found
        if kind is float:
            return PLAIN | SOUND if value - value else found  # inf - inf and NaN - NaN are NaN
        return 0
    for item in value:
        kind = type(item)
        if kind is str:
            if item.isascii() or not LONE_SURROGATE.search(item):
                continue
            found &= ~SOUND
        elif kind is int:
            if _NEG_BIG < item < _BIG:
                continue
            found &= ~SOUND
        elif kind is bool or item is None:
            continue
        elif kind is float:
            if item - item:
                found &= ~FINITE
        elif kind is dict or kind is list or kind is tuple:
            state = _scan(item, depth + 1) if depth < _NEAR else _scan_far(item, depth + 1)
            if not state:
                return 0
            found &= state
        else:
            return 0
    return found


def _scan_far(value: Any, depth: int) -> int:
    """`_scan` of a container `depth` levels down, iteratively: any depth, no recursion."""
    found = PLAIN | FINITE | SOUND
    stack: list[tuple[Any, int]] = [(value, depth)]
    while stack:
        node, depth = stack.pop()
        if type(node) is dict:
            for key in node:
                if type(key) is not str:
                    return 0
                if not key.isascii() and LONE_SURROGATE.search(key):
                    found &= ~SOUND
            node = node.values()
        for item in node:
            kind = type(item)
            if kind is str:
                if not item.isascii() and LONE_SURROGATE.search(item):
                    found &= ~SOUND
            elif kind is int:
                if not _NEG_BIG < item < _BIG:
                    found &= ~SOUND
            elif kind is bool or item is None:
                continue
            elif kind is float:
                if item - item:
                    found &= ~FINITE
            elif kind is dict or kind is list or kind is tuple:
                if depth >= MAX_DEPTH:
                    found &= ~SOUND  # still walked: a non-JSON object deeper down is API misuse
                stack.append((item, depth + 1))
            else:
                return 0
    return found


def _walk(value: Any) -> Any:
    """(path, value, depth) of `value` and every part of it, depth first, iteratively.

    `depth` counts the containers around the part (0 for `value` itself)."""
    stack: list[tuple[str, Any, int]] = [("$", value, 0)]
    while stack:
        path, node, depth = stack.pop()
        yield path, node, depth
        if isinstance(node, dict):
            stack.extend(
                (f"{path}.{key}" if isinstance(key, str) else path, item, depth + 1)
                for key, item in reversed(node.items())
            )
        elif isinstance(node, (list, tuple)):
            items: list[Any] = list(node)
            stack.extend((f"{path}[{i}]", items[i], depth + 1) for i in range(len(items) - 1, -1, -1))


def non_json_location(value: Any) -> str | None:
    """Path and type of the first part of `value` that is not JSON-like, else None.

    JSON-like means dict with str keys, list/tuple, str, int, float, bool or None.
    Non-finite floats are JSON-like here (they are data errors, reported by checks).
    """
    for path, node, _ in _walk(value):
        if isinstance(node, dict):
            for key in node:
                if not isinstance(key, str):
                    return f"{path} (key {key!r} of type {type(key).__name__})"
        elif not isinstance(node, (*_SCALARS, float, list, tuple)):
            return f"{path} ({type(node).__name__})"
    return None


def value_problem(value: Any) -> str | None:
    """Why a JSON-like value is not `SOUND`, as a phrase ("nesting deeper than 100 levels
    ...", "a lone surrogate at $.x ..."); None when it is sound."""
    for path, node, depth in _walk(value):
        if depth >= MAX_DEPTH and isinstance(node, (dict, list, tuple)):
            return _too_deep().args[0]
        if isinstance(node, str) and has_lone_surrogate(node):
            return f"a lone surrogate at {printable(path)} (not valid Unicode text)"
        if isinstance(node, dict):
            for key in node:
                if isinstance(key, str) and has_lone_surrogate(key):
                    return f"a lone surrogate in a key at {printable(path)} (not valid Unicode text)"
        if isinstance(node, int) and not _NEG_BIG < node < _BIG:
            return (
                f"an integer at {printable(path)} with more than {MAX_INT_DIGITS} digits (too long to convert to text)"
            )
    return None


def _has_bad_text(value: Any) -> bool:
    """True when a string or key with a lone surrogate hides anywhere in `value`."""
    for _, node, _ in _walk(value):
        if isinstance(node, str) and has_lone_surrogate(node):
            return True
        if isinstance(node, dict) and any(isinstance(key, str) and has_lone_surrogate(key) for key in node):
            return True
    return False


# id(value) -> (value, its flags); the entry keeps it alive. Oldest out first, in O(1) (a dict's
# first key is found past the holes earlier evictions left).
_VOUCHED: OrderedDict[int, tuple[Any, int]] = OrderedDict()
_VOUCHED_SIZE = 16_384


_ALL_FLAGS = PLAIN | FINITE | SOUND


def vouch_json_like(value: Any, within: int = 0) -> int:
    """`require_json_like(value)`, remembered: later calls on this very object answer at once.

    Only for values the library built and that nothing changes afterwards: the parameters of
    the tool specs `formats` keeps, which every new tool list they are in hands to the
    compiled-schema cache, which checks them again. Bounded; the oldest are forgotten first.
    `within`: the flags of a value `value` was built from, parts of it and plain JSON constants;
    when they are all set, they hold for `value` too, and it is not walked again."""
    flags = _ALL_FLAGS if within == _ALL_FLAGS else require_json_like(value, "tools")
    if len(_VOUCHED) >= _VOUCHED_SIZE:
        _VOUCHED.popitem(last=False)
    _VOUCHED[id(value)] = (value, flags)
    return flags


def vouched(value: Any) -> bool:
    """Whether `value` itself (this very object) was vouched for (`vouch_json_like`): the library
    built it and nothing changes it, so what is computed from its content may be kept by identity."""
    hit = _VOUCHED.get(id(value))
    return hit is not None and hit[0] is value


def require_json_like(value: Any, argument: str) -> int:
    """Raise TypeError naming `argument` when `value` is not JSON-like (API misuse).

    Returns flags, so callers that need more than this answer walk the value once:
    `FINITE` when it holds no NaN or infinity (what `has_non_finite` tells), `PLAIN` when
    every part of it has an exact JSON type (see `PLAIN`), `SOUND` when it can be checked
    (see `SOUND`; `value_problem` says why not).
    """
    vouched = _VOUCHED.get(id(value))
    if vouched is not None and vouched[0] is value:
        return vouched[1]
    state = _scan(value)
    if state:
        return state
    where = non_json_location(value)
    if where is not None:
        raise TypeError(f"{argument}: expected a JSON-like value, found a non-JSON object at {where}")
    return (0 if has_non_finite(value) else FINITE) | (0 if value_problem(value) else SOUND)


def has_non_finite(value: Any) -> bool:
    """True when a NaN or infinity hides anywhere in `value` (an iterative walk)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, float):
            if not math.isfinite(node):
                return True
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
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
