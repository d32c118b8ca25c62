"""Score a predictions JSON Lines file against a references file, joined by id.

Prediction row: `{"id", "tool_calls" | "tool_call" | "call" | "prediction" | "messages",
"response"?}`; a row with none of the call fields made no call. `messages` is an agent
conversation (OpenAI or Anthropic): its calls, joined with their results, are the prediction
and its last assistant text is the response when `response` is absent.

Reference row: `{"id", "expected_tool_calls" | "expected_tool_call" | "expected_tools" |
"expected", "query"?, "tools"?, "expected_response"?}`; an expected value of null or []
means no call was expected.

Output row (one per prediction, then one per reference nobody predicted):
`{"id", "expected_tool", "predicted_tool", <the metrics in SCORE_KEYS, then JUDGED_KEYS>
(0-1, null when not applicable), "no_call", "unknown_tool", "error", "judge_error",
"judge_usage"}`. A row that cannot be read or joined is an error row: its id (or `line-N`),
null metrics and an `error`, never a crash. The judged metrics are filled only by
`ascore_files` with a judge; a judge that fails on a row nulls only that metric and says
why in `judge_error`.
"""

from __future__ import annotations

import asyncio
import collections
import math
from collections.abc import AsyncIterator, Awaitable, Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from reflection._json import parse_json
from reflection.config import DEFAULT_SCORE_THRESHOLDS
from reflection.errors import RowProblem
from reflection.formats import normalize_history
from reflection.judge import Judge, JudgeError
from reflection.model import JudgeUsage, ToolCall
from reflection.rows import row_id
from reflection.scoring.calls import (
    binary_tool_call,
    staged_tool_call,
    tool_call_equivalence,
)
from reflection.scoring.dataset import (
    ScoreWeights,
    ScoringSample,
    ToolCallingEvaluator,
    interpret_score,
)
from reflection.scoring.response import exact_match, response_correctness
from reflection.scoring.trajectory import (
    TrajectoryCall,
    atrajectory_correctness,
    read_trajectory,
    trajectory_correctness,
    trajectory_from_messages,
)

__all__ = ["JUDGED_KEYS", "SCORE_KEYS", "ScoreSummary", "ascore_files", "metric_thresholds", "score_files", "score_row"]

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
    "response_meteor",
)
"""The deterministic metric keys of an output row, in order. Part of the public contract."""

JUDGED_KEYS: tuple[str, ...] = (
    "response_correctness",
    "tool_selection_judged",
    "trajectory_match",
)
"""The metric keys that need a judge, after `SCORE_KEYS` in an output row; null without one.
`trajectory_match` is the reference-based trajectory score, set when `tool_selection_judged`
is: `trajectory_correctness` is then the minimum of the two."""


def metric_thresholds(overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """Every metric key's threshold for the score report: a row below it fails the metric.
    1.0 (exact) by default, `DEFAULT_SCORE_THRESHOLDS` for the text metrics, then `overrides`
    (a config's `score_thresholds`). ValueError names an unknown metric or a value outside 0-1."""
    overrides = dict(overrides or {})
    unknown = sorted(str(key) for key in overrides if key not in SCORE_KEYS + JUDGED_KEYS)
    if unknown:
        raise ValueError(
            f"score_thresholds for unknown metrics {unknown}; choose from {list(SCORE_KEYS + JUDGED_KEYS)}"
        )
    bad = {
        key: value
        for key, value in overrides.items()
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1
    }
    if bad:
        raise ValueError(f"score_thresholds must be numbers between 0 and 1, got {bad}")
    return {
        **dict.fromkeys(SCORE_KEYS + JUDGED_KEYS, 1.0),
        **DEFAULT_SCORE_THRESHOLDS,
        **{key: float(value) for key, value in overrides.items()},
    }


_ARGUMENTS: tuple[Literal["input_parameters"]] = ("input_parameters",)
_PREDICTION_KEYS = ("tool_calls", "tool_call", "call", "prediction")
_REFERENCE_KEYS = ("expected_tool_calls", "expected_tool_call", "expected_tools", "expected")


def error_row(rid: str | None, message: str) -> dict[str, Any]:
    """An output row for a row that could not be read, joined or scored."""
    return _blank_row(rid, message)


def _blank_row(rid: str | None, error: str | None, expected_tool: str | None = None) -> dict[str, Any]:
    """Every key of an output row, in order, with null metrics."""
    row: dict[str, Any] = {"id": rid, "expected_tool": expected_tool, "predicted_tool": None}
    row.update(dict.fromkeys(SCORE_KEYS + JUDGED_KEYS))
    row.update({"no_call": False, "unknown_tool": False, "error": error, "judge_error": None, "judge_usage": None})
    return row


def score_row(
    prediction: Mapping[str, Any],
    reference: Mapping[str, Any],
    rid: str,
    evaluator: ToolCallingEvaluator | None = None,
    *,
    wordnet: str | Path | None = None,
) -> dict[str, Any]:
    """The output row for one joined pair, without the judged metrics (null). Raises
    `RowProblem` when the pair is unusable. `wordnet` is as in `score_files`."""
    from reflection.scoring.response import find_wordnet

    return _score_pair(prediction, reference, rid, evaluator or ToolCallingEvaluator(), find_wordnet(wordnet))[0]


@dataclass(frozen=True)
class _JudgeInputs:
    """What the judged metrics need from one joined pair."""

    steps: list[TrajectoryCall]
    expected: list[TrajectoryCall]
    response: str | None
    """Both answers are set, or neither."""
    expected_response: str | None
    query: Any
    tools: Any

    @property
    def asks_judge(self) -> bool:
        """Whether there is anything to judge: both answers, or the available tools."""
        return self.response is not None or self.tools is not None


def _score_pair(
    prediction: Mapping[str, Any],
    reference: Mapping[str, Any],
    rid: str,
    evaluator: ToolCallingEvaluator,
    wordnet: Path | None,
) -> tuple[dict[str, Any], _JudgeInputs]:
    expected_raw = _field(reference, _REFERENCE_KEYS, "reference", rid)
    try:
        expected = read_trajectory(expected_raw)
    except ValueError as exc:
        raise RowProblem(f"reference {rid}: {exc}") from None
    for index, step in enumerate(expected):
        if step.error is not None:
            raise RowProblem(f"reference {rid}: expected call #{index} is not readable: {step.error}")
    predicted, steps, unreadable, response = _prediction(prediction)
    tools = reference.get("tools")
    # With one expected call or none, the dataset evaluator's error says the same in its words.
    row = _blank_row(rid, unreadable, expected_tool=expected[0].name if len(expected) == 1 else None)
    row["trajectory_correctness"] = trajectory_correctness(
        steps, expected, evaluation_params=_ARGUMENTS, include_reason=False, tools=tools
    ).score
    if len(expected) <= 1:
        # The prediction goes to the same public functions a Python user calls, as it is, so a
        # row scores exactly what the API gives (several calls included).
        expected_call = ToolCall(name=expected[0].name, arguments=expected[0].args) if expected else None
        sample = ScoringSample(
            sample_id=rid,
            query=_query_text(reference.get("query")),
            expected=expected_call,
            predicted=predicted,
            tools=tools,
        )
        try:
            record = evaluator.score_sample(sample)
        except ValueError as exc:
            raise RowProblem(f"row {rid}: {exc}") from None
        row["predicted_tool"] = record.predicted_tool
        for key in ("tool_selection_accuracy", "parameter_accuracy", "execution_success"):
            row[key] = 1.0 if getattr(record, key) else 0.0
        row.update(no_call=record.no_call, unknown_tool=record.unknown_tool, error=record.error)
        if expected_call is not None:
            row["tool_call_equivalence"] = tool_call_equivalence(predicted, expected_call, tools)
            row["binary_tool_call"] = binary_tool_call(predicted, expected_call)
            row["staged_tool_call"] = staged_tool_call(predicted, expected_call)
    expected_response = reference.get("expected_response")
    answer: str | None = None
    reference_answer: str | None = None
    if isinstance(expected_response, str) and isinstance(response, str):
        answer, reference_answer = response, expected_response
        row["response_exact_match"] = exact_match(response, expected_response)
        row["response_rouge_l"] = _rouge(response, expected_response)
        row["response_meteor"] = _meteor(response, expected_response, wordnet)
    inputs = _JudgeInputs(
        steps=steps,
        expected=expected,
        response=answer,
        expected_response=reference_answer,
        query=reference.get("query") or "",
        tools=reference.get("tools"),
    )
    return row, inputs


def _field(row: Mapping[str, Any], keys: tuple[str, ...], kind: str, rid: str) -> Any:
    for key in keys:
        if key in row:
            return row[key]
    raise RowProblem(
        f"{kind} {rid}: no expected calls; add them under {keys[0]!r} (null or [] when no call is expected)"
    )


def _prediction(row: Mapping[str, Any]) -> tuple[Any, list[TrajectoryCall], str | None, Any]:
    """(the prediction as the call metrics take it, its trajectory steps, why those steps could
    not be read, the response text).

    The prediction is the row's call field as it is (a JSON string stays a string), or the
    list of calls in `messages`."""
    response = row.get("response")
    if "messages" in row and not any(key in row for key in _PREDICTION_KEYS):
        history = normalize_history(row["messages"])
        calls = [call for message in history.messages if message.role == "assistant" for call in message.tool_calls]
        if response is None:
            texts = [m.content for m in history.messages if m.role == "assistant" and m.content.strip()]
            response = texts[-1] if texts else None
        return calls, trajectory_from_messages(history), None, response
    raw = next((row[key] for key in _PREDICTION_KEYS if key in row), None)
    try:
        return raw, read_trajectory(raw), None, response
    except ValueError as exc:
        # Model output that is not JSON is a wrong answer (no calls), not a broken row.
        return raw, [], f"the predicted calls cannot be read: {exc}", response


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


def _meteor(prediction: str, reference: str, wordnet: Path | None) -> float | None:
    from reflection.scoring.response import meteor_with  # WordNet found once per run (`_joined`)

    try:
        return meteor_with(prediction, reference, wordnet)
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


def score_files(
    predictions: str | Path,
    references: str | Path,
    *,
    weights: ScoreWeights | Mapping[str, float] | None = None,
    wordnet: str | Path | None = None,
) -> Iterator[dict[str, Any]]:
    """Output rows for every prediction, joined with its reference by id, then an error row
    for every reference nobody predicted. Unreadable, unjoinable and unusable rows become
    error rows; only an unreadable file raises (OSError). The judged metrics (`JUDGED_KEYS`)
    are null: use `ascore_files` with a judge for them. `wordnet` locates METEOR's WordNet
    (see `reflection.scoring.find_wordnet`)."""
    for row, _ in _joined(predictions, references, ToolCallingEvaluator(weights=weights), wordnet):
        yield row


async def ascore_files(
    predictions: str | Path,
    references: str | Path,
    *,
    judge: Judge | None = None,
    weights: ScoreWeights | Mapping[str, float] | None = None,
    concurrency: int | None = None,
    prompts_dir: Path | None = None,
    wordnet: str | Path | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """`score_files`, plus the judged metrics when `judge` is given, in the same order.

    Each joined row gets `response_correctness` when both answers exist, and, when its
    reference has `tools`, the judge's `tool_selection_judged` through
    `atrajectory_correctness`: `trajectory_correctness` becomes the minimum of the
    reference match (kept in `trajectory_match`) and the judged score. A judge that cannot
    answer leaves that metric null and says why in `judge_error`; the run goes on. Judge
    traffic per row is in `judge_usage`.

    The predictions are streamed: at most 2 x `concurrency` rows (default: the judge's
    `max_concurrency`) are being judged or waiting for an earlier row, whatever the file
    size; the judge's own limiter bounds its requests at once.
    `prompts_dir` overrides the shipped `scoring/*.md` templates, as in `ReflectionConfig`;
    `wordnet` is as in `score_files`.
    """
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    limit = concurrency or (judge.config.max_concurrency if judge is not None else 1)
    rows = _joined(predictions, references, ToolCallingEvaluator(weights=weights), wordnet)
    # Input order is kept with a queue of finished rows and running tasks; when it is full,
    # the oldest is awaited before the next row is read. Plain tasks (no task group), so an
    # abandoned iterator is safe.
    window: collections.deque[dict[str, Any] | asyncio.Task[dict[str, Any]]] = collections.deque()
    try:
        for row, inputs in rows:
            if len(window) >= 2 * limit:
                yield await _result(window.popleft())
            if judge is not None and inputs is not None and inputs.asks_judge:
                window.append(asyncio.create_task(_add_judged(judge, row, inputs, prompts_dir)))
            else:
                window.append(row)
            while window and _done(window[0]):
                yield await _result(window.popleft())
        while window:
            yield await _result(window.popleft())
    finally:
        rows.close()  # closes the predictions file now, not when the generator is collected
        tasks = [item for item in window if isinstance(item, asyncio.Task)]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _done(item: dict[str, Any] | asyncio.Task[dict[str, Any]]) -> bool:
    return not isinstance(item, asyncio.Task) or item.done()


async def _result(item: dict[str, Any] | asyncio.Task[dict[str, Any]]) -> dict[str, Any]:
    return await item if isinstance(item, asyncio.Task) else item


async def _add_judged(
    judge: Judge, row: dict[str, Any], inputs: _JudgeInputs, prompts_dir: Path | None
) -> dict[str, Any]:
    """`row` with its judged metrics, asked at once; a failed one stays null and is explained."""
    asks = []
    if inputs.response is not None and inputs.expected_response is not None:
        asks.append(_ask("response_correctness", _response_correctness(judge, inputs, prompts_dir)))
    if inputs.tools is not None:
        asks.append(_ask("tool_selection_judged", _trajectory(judge, inputs, prompts_dir)))
    problems: list[str] = []
    usages: list[JudgeUsage] = []
    for values, problem, usage in await asyncio.gather(*asks):
        row.update(values)
        if problem is not None:
            problems.append(problem)
        usages.append(usage)
    row["judge_error"] = "; ".join(problems) or None
    row["judge_usage"] = JudgeUsage.total(usages).model_dump()
    return row


async def _ask(
    metric: str,
    asking: Awaitable[tuple[dict[str, Any], JudgeUsage]],
) -> tuple[dict[str, Any], str | None, JudgeUsage]:
    """(row values, why the metric is missing, judge usage) for one judged metric."""
    try:
        values, usage = await asking
    except JudgeError as exc:
        return {}, f"{metric}: {exc.reason}", exc.usage
    except (TypeError, ValueError) as exc:  # a query or tool list the judge prompt cannot be built from
        return {}, f"{metric}: not asked: {exc}", JudgeUsage()
    return values, None, usage


async def _response_correctness(
    judge: Judge, inputs: _JudgeInputs, prompts_dir: Path | None
) -> tuple[dict[str, Any], JudgeUsage]:
    assert inputs.response is not None and inputs.expected_response is not None
    judged = await response_correctness(
        judge,
        prediction=inputs.response,
        reference=inputs.expected_response,
        query=inputs.query,
        prompts_dir=prompts_dir,
    )
    return {"response_correctness": judged.score}, judged.usage


async def _trajectory(
    judge: Judge, inputs: _JudgeInputs, prompts_dir: Path | None
) -> tuple[dict[str, Any], JudgeUsage]:
    # The same reference match as the deterministic row (same mode, parameters and defaults),
    # so trajectory_match equals the value trajectory_correctness has without a judge.
    result = await atrajectory_correctness(
        inputs.steps,
        inputs.expected,
        judge=judge,
        available_tools=inputs.tools,
        query=inputs.query,
        prompts_dir=prompts_dir,
        evaluation_params=_ARGUMENTS,
        include_reason=False,
        tools=inputs.tools,
    )
    values = {
        "trajectory_correctness": result.score,
        "trajectory_match": result.match_score,
        "tool_selection_judged": result.selection_score,
    }
    return values, result.usage or JudgeUsage()


def _joined(
    predictions: str | Path,
    references: str | Path,
    evaluator: ToolCallingEvaluator,
    wordnet: str | Path | None,
) -> Generator[tuple[dict[str, Any], _JudgeInputs | None], None, None]:
    """Every output row in order, with what the judge needs for it (None for error rows).
    The references are held in memory; the predictions are read one line at a time."""
    from reflection.scoring.response import find_wordnet

    wordnet = find_wordnet(wordnet)  # once per run, not per row
    table: dict[str, Mapping[str, Any]] = {}
    problems: list[dict[str, Any]] = []
    for number, raw, problem in _read_lines(Path(references), "references"):
        rid = row_id(raw, number)
        if problem is not None or not isinstance(raw, Mapping):
            problems.append(error_row(rid, problem or f"references line {number} is not a JSON object"))
        elif raw.get("id") is None or isinstance(raw.get("id"), (dict, list)):
            problems.append(error_row(rid, f'references line {number} has no usable "id" (a string or a number)'))
        elif rid in table:
            problems.append(error_row(rid, f"references line {number} repeats id {rid!r}; the first one is used"))
        else:
            table[rid] = raw
    for row in problems:
        yield row, None
    seen: set[str] = set()
    for number, raw, problem in _read_lines(Path(predictions), "predictions"):
        rid = row_id(raw, number)
        if problem is not None or not isinstance(raw, Mapping):
            yield error_row(rid, problem or f"predictions line {number} is not a JSON object"), None
        elif raw.get("id") is None or isinstance(raw.get("id"), (dict, list)):
            yield error_row(rid, f'predictions line {number} has no usable "id" (a string or a number)'), None
        elif rid in seen:
            yield error_row(rid, f"predictions line {number} repeats id {rid!r}; only the first one is scored"), None
        elif rid not in table:
            yield error_row(rid, f"no reference has id {rid!r}"), None
        else:
            seen.add(rid)
            try:
                pair: tuple[dict[str, Any], _JudgeInputs | None] = _score_pair(raw, table[rid], rid, evaluator, wordnet)
            except (RowProblem, TypeError) as exc:  # TypeError: a value that is not JSON-like
                pair = error_row(rid, str(exc)), None
            yield pair
    for rid in table:
        if rid not in seen:
            yield error_row(rid, f"no prediction has id {rid!r}"), None


class ScoreSummary:
    """Running means of the output rows, plus the dataset evaluator's overall score and band,
    and the judge's traffic. `judge` says whether a judge was configured for the run;
    `wordnet` is the run's (see `score_files`), to say whether METEOR used synonyms. Raises
    ValueError when `wordnet` (or `REFLECTION_WORDNET`) is not a WordNet database."""

    def __init__(
        self,
        weights: ScoreWeights | Mapping[str, float] | None = None,
        *,
        judge: bool = False,
        wordnet: str | Path | None = None,
    ):
        from reflection.scoring.response import find_wordnet

        self.weights = weights if isinstance(weights, ScoreWeights) else ScoreWeights.model_validate(weights or {})
        self.judge = judge
        self.meteor_synonyms = find_wordnet(wordnet) is not None
        self.rows = 0
        self.error_rows = 0
        self.no_call = 0
        self.unknown_tool = 0
        self.judge_errors = 0
        self.usage = JudgeUsage()
        self._values: dict[str, list[float]] = {key: [] for key in SCORE_KEYS + JUDGED_KEYS}

    def add(self, row: Mapping[str, Any]) -> None:
        """Count one output row."""
        self.rows += 1
        scored = any(row.get(key) is not None for key in SCORE_KEYS)
        if not scored:
            self.error_rows += 1
            return
        self.no_call += bool(row.get("no_call"))
        self.unknown_tool += bool(row.get("unknown_tool"))
        self.judge_errors += bool(row.get("judge_error"))
        if row.get("judge_usage"):
            self.usage = JudgeUsage.total([self.usage, JudgeUsage.model_validate(row["judge_usage"])])
        for key in self._values:
            if row.get(key) is not None:
                self._values[key].append(float(row[key]))

    def to_dict(self) -> dict[str, Any]:
        """`{"rows", "error_rows", "no_call", "unknown_tool", "metrics": {key: {"mean", "n"}},
        "overall_score", "interpretation", "weights", "meteor_synonyms", "judge": {"configured",
        "error_rows", "requests", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd"}}`.
        `judge.error_rows` counts rows with a `judge_error`. `meteor_synonyms` is true when
        `response_meteor` used WordNet synonyms, false when it matched exact words and stems
        only (no WordNet found), and null when no row has a METEOR score."""
        metrics = {key: {"mean": math.fsum(v) / len(v) if v else None, "n": len(v)} for key, v in self._values.items()}
        overall = None
        parts = ("tool_selection_accuracy", "parameter_accuracy", "execution_success")
        if all(metrics[key]["n"] for key in parts):
            quality = metrics["response_rouge_l"]["mean"] or 0.0
            overall = math.fsum(
                [getattr(self.weights, key) * metrics[key]["mean"] for key in parts]
                + [self.weights.response_quality * quality]
            )
        usage = self.usage.model_dump(exclude={"prompt_chars"})
        return {
            "rows": self.rows,
            "error_rows": self.error_rows,
            "no_call": self.no_call,
            "unknown_tool": self.unknown_tool,
            "metrics": metrics,
            "overall_score": overall,
            "interpretation": interpret_score(overall) if overall is not None else None,
            "weights": self.weights.model_dump(),
            "meteor_synonyms": self.meteor_synonyms if metrics["response_meteor"]["n"] else None,
            "judge": {"configured": self.judge, "error_rows": self.judge_errors, **usage},
        }
