"""Score a predictions JSON Lines file against a references file, joined by id.

Prediction row: `{"id", "tool_calls" | "tool_call" | "call" | "prediction" | "messages",
"response"?}`; a row with none of the call fields made no call. `messages` is an agent
conversation (OpenAI or Anthropic): its calls, joined with their results, are the prediction
and its last assistant text is the response when `response` is absent.

Reference row: `{"id", "expected_tool_calls" | "expected_tool_call" | "expected_tools" |
"expected", "query"?, "tools"?, "expected_response"?}`; an expected value of null or []
means no call was expected.

Output row (one per prediction, then one per reference nobody predicted):
`{"id", "expected_tool", "predicted_tool", <the metrics in SCORE_KEYS> (0-1, null when not
applicable), "no_call", "unknown_tool", "error"}`. A row that cannot be read or joined is an
error row: its id (or `line-N`), null metrics and an `error`, never a crash.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from reflection._json import parse_json
from reflection.formats import normalize_history
from reflection.model import ToolCall
from reflection.rows import row_id
from reflection.scoring.calls import (
    binary_tool_call,
    read_calls,
    staged_tool_call,
    tool_call_equivalence,
)
from reflection.scoring.dataset import (
    ScoreWeights,
    ScoringSample,
    ToolCallingEvaluator,
    interpret_score,
)
from reflection.scoring.response import exact_match
from reflection.scoring.trajectory import (
    TrajectoryCall,
    read_trajectory,
    trajectory_correctness,
    trajectory_from_messages,
)

__all__ = ["SCORE_KEYS", "ScoreSummary", "score_files", "score_row"]

SCORE_KEYS: tuple[str, ...] = (
    "tool_call_equivalence",
    "binary_tool_call",
    "staged_tool_call",
    "tool_selection_accuracy",
    "parameter_accuracy",
    "execution_success",
    "trajectory_correctness",
    "response_exact_match",
    "response_rouge_l",
)
"""The metric keys of an output row, in order. Part of the public contract."""

_ARGUMENTS: tuple[Literal["input_parameters"]] = ("input_parameters",)
_PREDICTION_KEYS = ("tool_calls", "tool_call", "call", "prediction")
_REFERENCE_KEYS = ("expected_tool_calls", "expected_tool_call", "expected_tools", "expected")


class RowProblem(ValueError):
    """A row that cannot be scored; its message goes into the error row."""


def error_row(rid: str | None, message: str) -> dict[str, Any]:
    """An output row for a row that could not be read, joined or scored."""
    row: dict[str, Any] = {"id": rid, "expected_tool": None, "predicted_tool": None}
    row.update(dict.fromkeys(SCORE_KEYS))
    row.update({"no_call": False, "unknown_tool": False, "error": message})
    return row


def score_row(prediction: Mapping[str, Any], reference: Mapping[str, Any], rid: str,
              evaluator: ToolCallingEvaluator | None = None) -> dict[str, Any]:
    """The output row for one joined pair. Raises `RowProblem` when the pair is unusable."""
    evaluator = evaluator or ToolCallingEvaluator()
    expected_raw = _field(reference, _REFERENCE_KEYS, "reference", rid)
    try:
        expected = read_trajectory(expected_raw)
    except ValueError as exc:
        raise RowProblem(f"reference {rid}: {exc}") from None
    for index, step in enumerate(expected):
        if step.error is not None:
            raise RowProblem(f"reference {rid}: expected call #{index} is not readable: {step.error}")
    calls, steps, unreadable, response = _prediction(prediction)
    row: dict[str, Any] = {"id": rid, "expected_tool": expected[0].name if len(expected) == 1 else None,
                           "predicted_tool": calls[0].name if calls else None}
    row.update(dict.fromkeys(SCORE_KEYS))
    row.update({"no_call": False, "unknown_tool": False, "error": unreadable})
    row["trajectory_correctness"] = trajectory_correctness(
        steps, expected, evaluation_params=_ARGUMENTS, include_reason=False,
        tools=reference.get("tools")).score
    if len(expected) <= 1:
        expected_call = None
        if expected:
            step = expected[0]
            expected_call = ToolCall(name=step.name, arguments=step.args)
        sample = ScoringSample(sample_id=rid, query=_query_text(reference.get("query")), expected=expected_call,
                               predicted=calls, tools=reference.get("tools"))
        try:
            record = evaluator.score_sample(sample)
        except ValueError as exc:
            raise RowProblem(f"row {rid}: {exc}") from None
        row["predicted_tool"] = record.predicted_tool
        for key in ("tool_selection_accuracy", "parameter_accuracy", "execution_success"):
            row[key] = 1.0 if getattr(record, key) else 0.0
        row.update(no_call=record.no_call, unknown_tool=record.unknown_tool, error=unreadable or record.error)
        if expected_call is not None:
            chosen = next((c for c in calls if c.name == expected_call.name), calls[0] if calls else None)
            if unreadable:
                chosen = None  # not even JSON: 0 on every call metric, staged included
            tools = reference.get("tools")
            row["tool_call_equivalence"] = tool_call_equivalence(chosen, expected_call, tools) if chosen else 0.0
            row["binary_tool_call"] = binary_tool_call(chosen, expected_call) if chosen else 0.0
            row["staged_tool_call"] = staged_tool_call(chosen, expected_call) if chosen else 0.0
    expected_response = reference.get("expected_response")
    if isinstance(expected_response, str) and isinstance(response, str):
        row["response_exact_match"] = exact_match(response, expected_response)
        row["response_rouge_l"] = _rouge(response, expected_response)
    return row


def _field(row: Mapping[str, Any], keys: tuple[str, ...], kind: str, rid: str) -> Any:
    for key in keys:
        if key in row:
            return row[key]
    raise RowProblem(f"{kind} {rid}: no expected calls; add them under {keys[0]!r} (null or [] when no call is expected)")


def _prediction(row: Mapping[str, Any]) -> tuple[list[ToolCall], list[TrajectoryCall], str | None, Any]:
    """(calls, trajectory steps, why the prediction is unreadable, response text)."""
    response = row.get("response")
    if "messages" in row and not any(key in row for key in _PREDICTION_KEYS):
        history = normalize_history(row["messages"])
        calls = [call for message in history.messages if message.role == "assistant" for call in message.tool_calls]
        if response is None:
            texts = [m.content for m in history.messages if m.role == "assistant" and m.content.strip()]
            response = texts[-1] if texts else None
        return calls, trajectory_from_messages(history), None, response
    raw = next((row[key] for key in _PREDICTION_KEYS if key in row), None)
    if isinstance(raw, str):
        try:
            raw = parse_json(raw)
        except ValueError as exc:
            # Model output that is not JSON is a wrong answer, not a broken row.
            return [ToolCall(name="", error=f"the predicted call is not valid JSON: {exc}")], [], (
                f"the predicted call is not valid JSON: {exc}"), response
    calls = _calls(raw)
    steps = [TrajectoryCall(name=c.name, args=c.arguments, error=c.error) for c in calls]
    return calls, steps, None, response


def _calls(raw: Any) -> list[ToolCall]:
    if raw is None or raw == []:
        return []
    if isinstance(raw, Mapping) and raw.get("role") == "assistant" and not raw.get("tool_calls") and not isinstance(
            raw.get("content"), list):
        return []  # an assistant message answering in text
    return read_calls(raw)


def _query_text(query: Any) -> str:
    if query is None or isinstance(query, str):
        return query or ""
    users = [m.content for m in normalize_history(query).messages if m.role == "user"]
    return users[-1] if users else ""


def _rouge(prediction: str, reference: str) -> float | None:
    from reflection.scoring.response import rouge_l

    try:
        return rouge_l(prediction, reference)
    except ImportError:
        return None  # the summary says how to turn it on


def _read_lines(path: Path, kind: str) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, parsed row or None, problem) for every non-blank line."""
    with path.open("rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield number, parse_json(line), None
            except ValueError as exc:
                yield number, None, f"{kind} line {number} is not valid JSON: {exc}"


def score_files(predictions: Path, references: Path, *,
                weights: ScoreWeights | Mapping[str, float] | None = None) -> Iterator[dict[str, Any]]:
    """Output rows for every prediction, joined with its reference by id, then an error row
    for every reference nobody predicted. Unreadable, unjoinable and unusable rows become
    error rows; only an unreadable file raises (OSError)."""
    evaluator = ToolCallingEvaluator(weights=weights)
    table: dict[str, Mapping[str, Any]] = {}
    problems: list[dict[str, Any]] = []
    for number, raw, problem in _read_lines(references, "references"):
        rid = row_id(raw, number)
        if problem is not None or not isinstance(raw, Mapping):
            problems.append(error_row(rid, problem or f"references line {number} is not a JSON object"))
        elif raw.get("id") is None or isinstance(raw.get("id"), (dict, list)):
            problems.append(error_row(rid, f"references line {number} has no usable \"id\" (a string or a number)"))
        elif rid in table:
            problems.append(error_row(rid, f"references line {number} repeats id {rid!r}; the first one is used"))
        else:
            table[rid] = raw
    yield from problems
    seen: set[str] = set()
    for number, raw, problem in _read_lines(predictions, "predictions"):
        rid = row_id(raw, number)
        if problem is not None or not isinstance(raw, Mapping):
            yield error_row(rid, problem or f"predictions line {number} is not a JSON object")
        elif raw.get("id") is None or isinstance(raw.get("id"), (dict, list)):
            yield error_row(rid, f"predictions line {number} has no usable \"id\" (a string or a number)")
        elif rid in seen:
            yield error_row(rid, f"predictions line {number} repeats id {rid!r}; only the first one is scored")
        elif rid not in table:
            yield error_row(rid, f"no reference has id {rid!r}")
        else:
            seen.add(rid)
            try:
                yield score_row(raw, table[rid], rid, evaluator)
            except (RowProblem, TypeError) as exc:  # TypeError: a value that is not JSON-like
                yield error_row(rid, str(exc))
    for rid in table:
        if rid not in seen:
            yield error_row(rid, f"no prediction has id {rid!r}")


class ScoreSummary:
    """Running means of the output rows, plus the dataset evaluator's overall score and band."""

    def __init__(self, weights: ScoreWeights | Mapping[str, float] | None = None):
        self.weights = weights if isinstance(weights, ScoreWeights) else ScoreWeights.model_validate(weights or {})
        self.rows = 0
        self.error_rows = 0
        self.no_call = 0
        self.unknown_tool = 0
        self._values: dict[str, list[float]] = {key: [] for key in SCORE_KEYS}

    def add(self, row: Mapping[str, Any]) -> None:
        """Count one output row."""
        self.rows += 1
        scored = any(row.get(key) is not None for key in SCORE_KEYS)
        if not scored:
            self.error_rows += 1
            return
        self.no_call += bool(row.get("no_call"))
        self.unknown_tool += bool(row.get("unknown_tool"))
        for key in SCORE_KEYS:
            if row.get(key) is not None:
                self._values[key].append(float(row[key]))

    def to_dict(self) -> dict[str, Any]:
        """`{"rows", "error_rows", "no_call", "unknown_tool", "metrics": {key: {"mean", "n"}},
        "overall_score", "interpretation", "weights"}`."""
        metrics = {key: {"mean": math.fsum(v) / len(v) if v else None, "n": len(v)} for key, v in self._values.items()}
        overall = None
        parts = ("tool_selection_accuracy", "parameter_accuracy", "execution_success")
        if all(metrics[key]["n"] for key in parts):
            quality = metrics["response_rouge_l"]["mean"] or 0.0
            overall = math.fsum([getattr(self.weights, key) * metrics[key]["mean"] for key in parts]
                                + [self.weights.response_quality * quality])
        return {
            "rows": self.rows,
            "error_rows": self.error_rows,
            "no_call": self.no_call,
            "unknown_tool": self.unknown_tool,
            "metrics": metrics,
            "overall_score": overall,
            "interpretation": interpret_score(overall) if overall is not None else None,
            "weights": self.weights.model_dump(),
        }
