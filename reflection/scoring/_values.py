"""JSON value comparison shared by the scoring metrics: equality, schema defaults, partial credit."""

from __future__ import annotations

import copy
from typing import Any

from reflection._json import dumps, json_type
from reflection._text import shorten

_NUMBER = (int, float)
_SHOWN = 60  # characters of one value in a difference


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: object key order is ignored, numbers compare by value (1 == 1.0),
    and booleans are not numbers (true != 1, which Python's `==` gets wrong)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, _NUMBER) and isinstance(b, _NUMBER):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def json_identical(a: Any, b: Any) -> bool:
    """Exact JSON equality: like `json_equal`, but an integer and a float are different
    values even when equal (1 != 1.0)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_identical(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(json_identical(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def with_defaults(arguments: dict[str, Any], schema: dict[str, Any] | None) -> dict[str, Any]:
    """`arguments` with every unset parameter that has a schema `default` filled in.

    Follows `properties` of nested objects and `items` of arrays; `$ref` and combinators
    (`anyOf`, `oneOf`, ...) are not followed, because which branch applies is ambiguous.
    """
    if not isinstance(schema, dict):
        return arguments
    return _fill(arguments, schema)


def _fill(value: Any, schema: Any) -> Any:
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict) and isinstance(schema.get("properties"), dict):
        out = dict(value)
        for key, sub in schema["properties"].items():
            if key in out:
                out[key] = _fill(out[key], sub)
            elif isinstance(sub, dict) and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_fill(item, schema["items"]) for item in value]
    return value


def argument_similarity(expected: dict[str, Any], actual: dict[str, Any]) -> float:
    """Fraction of keys (over the union of both sides) whose values match; a key whose
    values are both objects earns the fraction of its own keys that match, recursively.

    Two empty objects match fully (1.0): a call without arguments is not a wrong call.
    """
    keys = expected.keys() | actual.keys()
    if not keys:
        return 1.0
    total = 0.0
    for key in expected.keys() & actual.keys():
        a, b = expected[key], actual[key]
        if json_equal(a, b):
            total += 1.0
        elif isinstance(a, dict) and isinstance(b, dict):
            total += argument_similarity(a, b)
    return total / len(keys)


def argument_differences(expected: dict[str, Any], actual: dict[str, Any], path: str = "$") -> list[str]:
    """Readable differences between two argument objects, one line per differing key."""
    out: list[str] = []
    for key, want in expected.items():
        where = f"{path}.{key}"
        if key not in actual:
            out.append(f"{where} missing (expected {shorten(dumps(want), _SHOWN)})")
        elif not json_equal(want, actual[key]):
            if isinstance(want, dict) and isinstance(actual[key], dict):
                out.extend(argument_differences(want, actual[key], where))
            else:
                out.append(
                    f"{where}: expected {shorten(dumps(want), _SHOWN)}, got {shorten(dumps(actual[key]), _SHOWN)}"
                )
    for key, got in actual.items():
        if key not in expected:
            out.append(f"{path}.{key} not expected (got {shorten(dumps(got), _SHOWN)})")
    return out


def matches_type(value: Any, declared: Any) -> bool:
    """Whether `value` fits a JSON Schema `type` (a name or a list of names); no type fits all.

    As in JSON Schema, 2.0 is an integer and every integer is a number; a boolean is neither.
    """
    if declared is None:
        return True
    names = declared if isinstance(declared, list) else [declared]
    kind = json_type(value)
    for name in names:
        if name == kind:
            return True
        if name == "number" and kind == "integer":
            return True
        if name == "integer" and kind == "number" and float(value).is_integer():
            return True
    return False
