"""Machine fixes for static failures, each suggestion re-validated before it is offered.

A call that fails only on things a machine can fix safely gets a corrected `ToolCall`:

- a function name with a typo, when exactly one defined tool is close (difflib ratio of the
  lower-cased names >= `NAME_CUTOFF`);
- unknown parameters, which are dropped: only names the schema defines nowhere (a name that
  some branch or reference defines is never removed, even where `additionalProperties: false`
  beside it rejects it);
- a wrong scalar type at any depth: "5" -> 5, "2.5" -> 2.5, "true" -> true, 5 -> "5",
  true -> "true", and a scalar wrapped as [scalar] where an array is expected;
- an enum or const value that matches exactly one allowed value ignoring case and
  surrounding spaces (or as text: "2" for 2).

Fixes are applied in rounds (a wrapped value may then need its items coerced) and the
patched call is checked again by the same checker after each round. Only a call that
passes every check is suggested; otherwise there is no suggestion.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from difflib import SequenceMatcher
from functools import lru_cache
from typing import Any

from reflection._json import dumps, json_type
from reflection._lru import LRU
from reflection._text import shorten
from reflection.model import ToolCall, trusted

NAME_CUTOFF = 0.8
"""Minimum difflib similarity for a function-name suggestion."""

MAX_NOTES = 20
"""Correction notes listed; one more note counts the rest."""

_MAX_ROUNDS = 4
_ARGUMENT_FIXES = frozenset({"non_existent_parameter", "incorrect_parameter_type", "allowed_values_violation"})
_FIXABLE = _ARGUMENT_FIXES | {"non_existent_function"}
_NO: Any = object()
_INTEGER = re.compile(r"[+-]?\d+\Z")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\Z")


def closest_name(name: str, candidates: Sequence[str]) -> str | None:
    """The one candidate close enough to `name`, or None when none or several are."""
    return _closest_name(name, tuple(candidates))


@lru_cache(maxsize=4096)  # difflib is slow and agents repeat their typos; bounded
def _closest_name(name: str, candidates: tuple[str, ...]) -> str | None:
    wanted = name.lower()
    matcher = None  # made only when a pair is not known yet
    close = []
    for candidate in candidates:
        other = candidate.lower()
        near = _NEAR.get((wanted, other))
        if near is None:
            if matcher is None:
                matcher = SequenceMatcher(None, b=wanted)
            matcher.set_seq1(other)
            # The cheap upper bounds first, as difflib.get_close_matches does.
            near = (
                matcher.real_quick_ratio() >= NAME_CUTOFF
                and matcher.quick_ratio() >= NAME_CUTOFF
                and matcher.ratio() >= NAME_CUTOFF
            )
            _NEAR.put((wanted, other), near)
        if near:
            close.append(candidate)
    return close[0] if len(close) == 1 else None


# (name, candidate), lower-cased -> whether they are close: tool lists differ from row to row,
# but a mistyped name meets the same few tools in them, so a list seen for the first time mostly
# costs look-ups, not difflib.
_NEAR = LRU(static_stage=False)


def suggest_correction(
    call: ToolCall, failures: dict[str, list[Any]], evaluate: Callable[[ToolCall], dict[str, list[Any]]]
) -> tuple[ToolCall | None, list[str]]:
    """A corrected call that passes `evaluate` (the same checker), with notes on what changed.

    `failures` maps each failing check to its issues (objects with `check`, `segments`,
    `path`, `types`, `options` and `removable`; a `non_existent_function` issue carries the
    one close name, from `closest_name`, in `options`). Returns (None, []) when no safe fix makes the
    call pass.
    """
    if not failures or not failures.keys() <= _FIXABLE:
        return None, []
    notes: list[str] = []
    name = call.name
    candidate = call
    arguments = _copy(call.arguments if call.arguments is not None else {})
    if "non_existent_function" in failures:
        issue = failures["non_existent_function"][0]
        guess = issue.options[0] if issue.options else None
        if guess is None:
            return None, []
        notes.append(f'renamed function "{name}" to "{guess}", the only defined tool with a close name')
        name = guess
        candidate = _candidate(name, arguments, call)
        failures = evaluate(candidate)
    for _ in range(_MAX_ROUNDS):
        if not failures:
            return candidate, _listed(notes)
        if not failures.keys() <= _ARGUMENT_FIXES:
            return None, []
        changed = False
        for issues in failures.values():
            for issue in issues:
                changed = _fix(arguments, issue, notes) or changed
        if not changed:
            return None, []
        candidate = _candidate(name, arguments, call)
        failures = evaluate(candidate)
    return (candidate, _listed(notes)) if not failures else (None, [])


def _listed(notes: list[str]) -> list[str]:
    # As findings are: the first MAX_NOTES, then how many more (a long array can need thousands).
    if len(notes) <= MAX_NOTES:
        return notes
    return [*notes[:MAX_NOTES], f"and {len(notes) - MAX_NOTES} more change(s) of the same kinds"]


def _candidate(name: str, arguments: dict[str, Any], call: ToolCall) -> ToolCall:
    # `ToolCall(name=name, arguments=arguments, id=call.id)` without validation: the name is
    # the call's or a defined tool's, and the arguments a copy of the validated call's.
    return trusted(ToolCall, name=name, arguments=dict(arguments), id=call.id)


def _copy(value: Any) -> Any:
    # Containers are copied (tuples become lists, so fixes can assign into them); scalars
    # are shared, and skipped without a call each.
    if isinstance(value, dict):
        return {k: _copy(v) if isinstance(v, _CONTAINERS) else v for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy(v) if isinstance(v, _CONTAINERS) else v for v in value]
    return value


_CONTAINERS = (dict, list, tuple)


def _fix(arguments: dict[str, Any], issue: Any, notes: list[str]) -> bool:
    if not issue.segments:
        return False
    parent: Any = arguments
    for part in issue.segments[:-1]:
        try:
            parent = parent[part]
        except (KeyError, IndexError, TypeError):
            return False
    last = issue.segments[-1]
    if isinstance(parent, dict):
        if not isinstance(last, str) or last not in parent:
            return False
    elif not (isinstance(parent, list) and isinstance(last, int) and 0 <= last < len(parent)):
        return False
    if issue.check == "non_existent_parameter":
        if not issue.removable:  # the schema defines it somewhere: never removed
            return False
        del parent[last]
        notes.append(f"{issue.path}: removed the unknown parameter")
        return True
    old = parent[last]
    if issue.check == "incorrect_parameter_type":
        for target in issue.types:
            new = _coerce(old, target)
            if new is not _NO:
                parent[last] = new
                if target == "array":
                    notes.append(f"{issue.path}: wrapped {_show(old)} in an array")
                else:
                    notes.append(f"{issue.path}: changed {_show(old)} ({json_type(old)}) to {_show(new)} ({target})")
                return True
        return False
    if issue.check == "allowed_values_violation":
        matches = _unique(_loose_matches(old, issue.options))
        if len(matches) != 1:
            return False
        parent[last] = matches[0]
        notes.append(f"{issue.path}: changed {_show(old)} to the allowed value {_show(matches[0])}")
        return True
    return False


def _coerce(value: Any, target: str) -> Any:
    if target == "integer" and isinstance(value, str):
        text = value.strip()
        try:
            if _INTEGER.match(text):
                return int(text)
            if _NUMBER.match(text):
                number = float(text)
                if math.isfinite(number) and number.is_integer():
                    return int(number)
        except (ValueError, OverflowError):  # longer than Python's int-from-text limit
            return _NO
        return _NO
    if target == "number" and isinstance(value, str):
        text = value.strip()
        try:
            if _INTEGER.match(text):
                return int(text)
            if _NUMBER.match(text):
                number = float(text)
                return number if math.isfinite(number) else _NO
        except (ValueError, OverflowError):
            return _NO
        return _NO
    if target == "boolean" and isinstance(value, str):
        return {"true": True, "false": False}.get(value.strip().lower(), _NO)
    if target == "string" and isinstance(value, (bool, int, float)):
        return dumps(value)
    if target == "array" and not isinstance(value, list):
        return [value]
    return _NO


def _loose_matches(value: Any, options: tuple[Any, ...]) -> list[Any]:
    """The options `_loosely_equal` to `value`: looked up in an index of the options, so an
    array of many values against a long enum costs one pass over the enum, not one per value.

    Indexes are kept by the identity of the options tuple (the checker passes the same tuple
    for every error of one enum), bounded."""
    hit = _INDEXES.get(id(options))
    if hit is not None and hit[0] is options:
        index = hit[1]
    else:
        index = _loose_index(options)
        _INDEXES.put(id(options), (options, index))  # the entry keeps `options` alive: its id stays its own
    if isinstance(value, str):
        return index.get(("fold", value.strip().casefold()), []) + index.get(("dumps", value.strip()), [])
    if isinstance(value, _SCALARS):
        return index.get(("text", dumps(value)), [])
    return []


_INDEXES = LRU(256, static_stage=False)  # id(options) -> (options, their index)


def _loose_index(options: tuple[Any, ...]) -> dict[tuple[str, str], list[Any]]:
    index: dict[tuple[str, str], list[Any]] = {}
    for option in options:
        if isinstance(option, str):
            index.setdefault(("fold", option.strip().casefold()), []).append(option)
            index.setdefault(("text", option.strip()), []).append(option)
        elif isinstance(option, _SCALARS):
            index.setdefault(("dumps", dumps(option)), []).append(option)
    return index


_SCALARS = (str, int, float, bool, type(None))


def _loosely_equal(value: Any, option: Any) -> bool:
    if isinstance(value, str) and isinstance(option, str):
        return value.strip().casefold() == option.strip().casefold()
    if isinstance(value, str) and isinstance(option, _SCALARS):
        return value.strip() == dumps(option)
    if isinstance(option, str) and isinstance(value, _SCALARS):
        return dumps(value) == option.strip()
    return False


def _unique(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for value in values:
        if not any(type(value) is type(seen) and value == seen for seen in out):
            out.append(value)
    return out


def _show(value: Any, limit: int = 60) -> str:
    text = dumps(value)
    return shorten(text, limit, ellipsis="...")
