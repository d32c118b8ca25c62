"""Dataset rows in and out: the JSON shape shared by `reflection check` and `reflection batch`.

Input row: `{"id", "tools", "history", "call"}` (or `"tool_calls"` for a list of calls).
Output row (public contract):
    {"id", "overall_valid", "static_<check>"... (1.0 pass / 0.0 fail),
     "semantic_<check>"..., "semantic_avg_score_<category>"... (0-1, when the judge ran),
     "judge_skipped", "warnings", "usage", "latency_ms", "results": [full result per call]}
Error row: {"id", "overall_valid": null, "error": "<what is wrong and what to do>"}.
For a row with several calls, each flat key is the minimum over its calls and
`overall_valid` is False if any call is invalid, else null if any is unknown, else True.

Two sinks build the same output row: `result_row` from result models (the Python API,
judged rows), `plain_row` from the plain data of a static-only reflection (what the CLI
writes, with no models in between). `tests/test_sinks.py` holds them byte-identical.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reflection._json import dumps_line, parse_json, parse_json_keeping
from reflection.errors import RowError
from reflection.model import _ZERO_USAGE, STATIC_CHECKS, JudgeUsage, ReflectionResult, ToolCall

__all__ = ["InputRow", "Line", "RowError", "error_row", "line_of", "parse_line", "plain_row", "read_row", "result_row"]

_TEXT_MEMBERS = frozenset({"tools"})
# Members too deep for the JSON parsers stay as text; their normaliser reports them (a failing
# invalid_tool_call, invalid_api_spec or a history warning) and the rest of the row is read.
_DEEP_MEMBERS = frozenset({"call", "tool_calls", "history"})


def parse_line(line: bytes) -> Any:
    """Parse one JSON Lines row, leaving its `tools` as JSON text (bytes).

    Logged rows repeat the same tool list; as text it is the key of `normalize_tools`'
    cache, so it is parsed and normalised once, not on every row. A `tools` that is a JSON
    string (the list encoded twice, as some logs store it) comes as that string, the JSON text
    the other readers hand on. Raises ValueError with the parser's message when the line is
    not JSON.
    """
    row = parse_json_keeping(line, _TEXT_MEMBERS, _DEEP_MEMBERS)
    tools = row.get("tools") if type(row) is dict else None
    if type(tools) is bytes and tools[:1] == b'"':
        row["tools"] = parse_json(tools)
    return row


@dataclass(frozen=True)
class InputRow:
    """One dataset row, ready to reflect."""

    id: str
    call: Any
    tools: Any
    history: Any


def row_id(raw: Any, line_number: int) -> str:
    """The row's id as a string; rows without one are named by their 1-based line number."""
    if isinstance(raw, Mapping) and raw.get("id") is not None and not isinstance(raw.get("id"), (dict, list)):
        return str(raw["id"])
    return f"line-{line_number}"


def read_row(raw: Any, line_number: int) -> InputRow:
    """Validate the row's shape; raise RowError with an actionable message when it is unusable."""
    rid = row_id(raw, line_number)
    if not isinstance(raw, Mapping):
        raise RowError(f"row {rid}: expected a JSON object with id, tools, history and call, got {type(raw).__name__}")
    if "call" in raw:
        call = raw["call"]
    elif "tool_calls" in raw:
        call = raw["tool_calls"]
        if not isinstance(call, (list, bytes)):  # bytes: text too deep to parse, reported as a call
            raise RowError(f"row {rid}: \"tool_calls\" must be a list of calls")
    else:
        raise RowError(f"row {rid}: no \"call\" or \"tool_calls\" field; add the proposed call under \"call\"")
    return InputRow(id=rid, call=call, tools=raw.get("tools"), history=raw.get("history"))


def _combine(verdicts: list[bool | None]) -> bool | None:
    if any(v is False for v in verdicts):
        return False
    if any(v is None for v in verdicts):
        return None
    return True


def result_row(rid: str, results: ReflectionResult | list[ReflectionResult], *, latency_ms: float | None = None,
               flat_only: bool = False) -> dict[str, Any]:
    """The output row for a reflected input row; with `flat_only`, just `id`, `overall_valid` and
    the flat keys (what `--flat` writes: verdicts at scale, without the structured results)."""
    if isinstance(results, ReflectionResult):  # the common case: one call, nothing to combine
        items = [results]
        flat = results.flat()
        verdict = results.overall_valid
    else:
        items = results
        flat = {}
        for result in items:
            for key, value in result.flat().items():
                flat[key] = min(value, flat.get(key, value))
        verdict = _combine([r.overall_valid for r in items])
    flat.pop("overall_valid", None)
    row: dict[str, Any] = {"id": rid, "overall_valid": verdict, **flat}
    if flat_only:
        return row
    skipped = sorted({r.judge_skipped for r in items if r.judge_skipped})
    row["judge_skipped"] = "; ".join(skipped) or None
    row["warnings"] = sorted({w for r in items for w in r.warnings})
    # Static-only rows all share the default (zero) usage object: dump it once, not per row.
    row["usage"] = (dict(_ZERO_USAGE) if all(r.usage is _NO_USAGE for r in items)
                    else JudgeUsage.total(r.usage for r in items).model_dump())
    row["latency_ms"] = latency_ms
    row["results"] = [r.model_dump(mode="json") for r in items]
    return row


_NO_USAGE = ReflectionResult.model_fields["usage"].default
_STATIC_KEYS = tuple((name, f"static_{name}") for name in STATIC_CHECKS)
_ALL_PASS_FLAT = {key: 1.0 for _, key in _STATIC_KEYS}


def plain_row(rid: str, results: dict[str, Any] | list[dict[str, Any]], *, latency_ms: float | None = None,
              flat_only: bool = False) -> dict[str, Any]:
    """`result_row` for the plain results of a static-only reflection (`pipeline._reflect_plain`),
    the CLI's sink: the same row, to be written with `line_of` (it shares constant parts and
    holds `ToolCall` objects), never handed to users."""
    if isinstance(results, dict):  # the common case: one call, nothing to combine
        items = [results]
        verdict = results["overall_valid"]
        checks = results["static"]["checks"]
        flat = _ALL_PASS_FLAT if verdict else {key: 1.0 if checks[name]["passed"] else 0.0 for name, key in _STATIC_KEYS}
    else:
        items = results
        flat = {key: min(1.0 if r["static"]["checks"][name]["passed"] else 0.0 for r in items)
                for name, key in _STATIC_KEYS} if items else {}
        verdict = _combine([r["overall_valid"] for r in items])
    row: dict[str, Any] = {"id": rid, "overall_valid": verdict, **flat}
    if flat_only:
        return row
    row["judge_skipped"] = items[0]["judge_skipped"] if items else None  # the same for every static-only result
    row["warnings"] = sorted({w for r in items for w in r["warnings"]})
    row["usage"] = _ZERO_USAGE
    row["latency_ms"] = latency_ms
    row["results"] = items
    return row


Line = tuple[dict[str, Any], bytes]
"""An output row's summary (`id`, `overall_valid`, and `error` when present: what the counts
and the progress display read) and its JSON line, newline included."""


def line_of(row: dict[str, Any]) -> Line:
    """A row (from `result_row`, `plain_row` or `error_row`) as it is written."""
    return {key: row[key] for key in ("id", "overall_valid", "error") if key in row}, dumps_line(row, _call_fields)


def _call_fields(value: Any) -> dict[str, Any]:
    # A ToolCall's fields, as model_dump(mode="json") gives them for the JSON its reader takes.
    if type(value) is ToolCall:
        return value.__dict__
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def error_row(rid: str, message: str) -> dict[str, Any]:
    """The output row for an input row that could not be reflected."""
    return {"id": rid, "overall_valid": None, "error": message}
