"""Dataset rows in and out: the JSON shape shared by `reflection check` and `reflection batch`.

Input row: `{"id", "tools", "history", "call"}` (or `"tool_calls"` for a list of calls).
Output row: `results.output_row` (public contract, documented in `reflection.results`), made
from the plain data of a static-only reflection (`pipeline.reflect_plain`, what the CLI writes)
or from result models (`result_row`: the Python API, judged rows).
Error row: {"id", "overall_valid": null, "error": "<what is wrong and what to do>"}.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reflection._json import dumps_line, parse_json, parse_json_keeping
from reflection.errors import RowError
from reflection.model import ReflectionResult, ToolCall
from reflection.results import ResultData, output_row

__all__ = ["InputRow", "Line", "RowError", "error_row", "line_of", "parse_line", "read_row", "result_row"]

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
            raise RowError(f'row {rid}: "tool_calls" must be a list of calls')
    else:
        raise RowError(f'row {rid}: no "call" or "tool_calls" field; add the proposed call under "call"')
    return InputRow(id=rid, call=call, tools=raw.get("tools"), history=raw.get("history"))


def result_row(
    rid: str,
    results: ReflectionResult | list[ReflectionResult],
    *,
    latency_ms: float | None = None,
    flat_only: bool = False,
) -> dict[str, Any]:
    """`results.output_row` for result models, each dumped (`model_dump(mode="json")`; with
    `flat_only`, only what a flat row reads: `flat_fields()`), so the row is the user's own."""

    def data(result: ReflectionResult) -> ResultData:
        return result.flat_fields() if flat_only else result.model_dump(mode="json")  # type: ignore[return-value]

    dumped = data(results) if isinstance(results, ReflectionResult) else [data(r) for r in results]
    return output_row(rid, dumped, latency_ms=latency_ms, flat_only=flat_only)


Line = tuple[dict[str, Any], bytes]
"""An output row's summary (`id`, `overall_valid`, and `error` when present: what the counts
and the progress display read) and its JSON line, newline included."""


def line_of(row: dict[str, Any]) -> Line:
    """A row (from `results.output_row`, `result_row` or `error_row`) as it is written."""
    return {key: row[key] for key in ("id", "overall_valid", "error") if key in row}, dumps_line(row, _call_fields)


def _call_fields(value: Any) -> dict[str, Any]:
    # A ToolCall's fields, as model_dump(mode="json") gives them for the JSON its reader takes.
    if type(value) is ToolCall:
        return value.__dict__
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def error_row(rid: str, message: str) -> dict[str, Any]:
    """The output row for an input row that could not be reflected."""
    return {"id": rid, "overall_valid": None, "error": message}
