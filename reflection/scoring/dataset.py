"""Dataset evaluator in the style of the common tool-calling evaluators.

Each sample has one expected call (or none) and the model's predicted call(s). Three flags
per sample, then means over the dataset and a weighted overall score. With several predicted
calls, the best-scoring call to the expected tool counts, so their order never matters:

- `tool_selection_accuracy`: the predicted function is the expected one.
- `parameter_accuracy`: the required parameters of the *expected* tool are present and every
  declared parameter has the type that tool's schema gives it (values are compared only with
  `compare_values=True`). Checking against the predicted tool's schema instead would give a
  wrong tool credit for its own parameters.
- `execution_success`: the right tool, and arguments that pass reflection's static checks
  against that tool's spec (its JSON Schema, and no parameter it does not declare).

Model failures (no call, a tool not in the inventory, unreadable arguments) are scored 0
with the reason in `error`; rows whose reference is broken are kept as unscored error records.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from reflection._json import json_type
from reflection.formats import normalize_tools
from reflection.model import ToolCall, ToolInventory, ToolSpec
from reflection.scoring._values import (
    json_equal,
    matches_type,
    with_defaults,
)
from reflection.scoring.calls import predicted_calls, read_calls

__all__ = [
    "DatasetReport",
    "SampleRecord",
    "ScoreWeights",
    "ScoringSample",
    "ToolCallingEvaluator",
    "evaluate_tool_calls",
    "interpret_score",
]

Band = Literal["Excellent", "Good", "Fair", "Poor"]
METRICS = ("tool_selection_accuracy", "parameter_accuracy", "execution_success", "response_quality")


def interpret_score(score: float) -> Band:
    """Excellent >= 90%, Good 75-90%, Fair 50-75%, Poor < 50%."""
    value = round(score, 9)  # 0.4 + 0.35 + 0.15 must band as 0.9, not 0.8999999999999999
    if value >= 0.90:
        return "Excellent"
    if value >= 0.75:
        return "Good"
    if value >= 0.50:
        return "Fair"
    return "Poor"


class ScoreWeights(BaseModel):
    """Weights of the overall score. Defaults 0.40 / 0.35 / 0.25 and response quality 0;
    custom weights must be non-negative and sum to 1."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    tool_selection_accuracy: float = Field(default=0.40, ge=0, allow_inf_nan=False)
    parameter_accuracy: float = Field(default=0.35, ge=0, allow_inf_nan=False)
    execution_success: float = Field(default=0.25, ge=0, allow_inf_nan=False)
    response_quality: float = Field(default=0.0, ge=0, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _partial(cls, data: Any) -> Any:
        # A custom dict names the weights it wants; the ones it leaves out are 0, not the defaults.
        if isinstance(data, Mapping) and data:
            return {name: data.get(name, 0.0) for name in METRICS} | dict(data)
        return data

    @model_validator(mode="after")
    def _sums_to_one(self) -> ScoreWeights:
        total = math.fsum(getattr(self, name) for name in METRICS)
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"weights must sum to 1, got {total:g}")
        return self


class ScoringSample(BaseModel):
    """One evaluation row: what was asked, what was expected and what the model did.

    `expected` is one call in any shape `normalize_calls` reads, or None when no call was
    expected; `predicted` is the model's call(s) in any such shape, or None / [] for no call.
    `tools` overrides the evaluator's inventory for this sample.
    """

    model_config = ConfigDict(extra="forbid")
    sample_id: str
    query: str = ""
    expected: Any = None
    predicted: Any = None
    tools: Any = None
    expected_response: str | None = None
    response: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _id(cls, data: Any) -> Any:
        # Datasets use "id" as often as "sample_id", and integers as often as strings.
        if isinstance(data, Mapping):
            data = dict(data)
            if "sample_id" not in data and "id" in data:
                data["sample_id"] = data.pop("id")
            if isinstance(data.get("sample_id"), int) and not isinstance(data["sample_id"], bool):
                data["sample_id"] = str(data["sample_id"])
        return data


class SampleRecord(BaseModel):
    """Per-sample result, for inspecting failures. `scored` is False when the sample itself
    was unusable (its `error` says why); such records are left out of the means."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    sample_id: str
    query: str = ""
    expected_tool: str | None = None
    predicted_tool: str | None = None
    tool_selection_accuracy: bool = False
    parameter_accuracy: bool = False
    execution_success: bool = False
    response_quality: float | None = None
    error: str | None = None
    scored: bool = True
    no_call: bool = False
    """No call was made when one was expected."""
    unknown_tool: bool = False
    """The predicted tool is not in the inventory."""


class DatasetReport(BaseModel):
    """Means over the scored samples, the weighted overall score and the per-sample records."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    samples: int
    scored: int
    tool_selection_accuracy: float | None
    parameter_accuracy: float | None
    execution_success: float | None
    response_quality: float | None
    overall_score: float | None
    interpretation: Band | None
    weights: ScoreWeights
    no_call: int = 0
    unknown_tool: int = 0
    errors: int = 0
    """Records with an `error`, scored or not."""
    records: tuple[SampleRecord, ...] = ()


class ToolCallingEvaluator:
    """Scores samples against one tool inventory (each sample may bring its own `tools`).

    `weights`: a `ScoreWeights` or a dict of the four metric names (left-out names weigh 0).
    `compare_values`: `parameter_accuracy` also needs every expected argument value to equal
    the predicted one (schema defaults applied on both sides, numbers by value).
    """

    def __init__(
        self,
        tools: Any = None,
        *,
        weights: ScoreWeights | Mapping[str, float] | None = None,
        compare_values: bool = False,
    ):
        self.inventory = normalize_tools(tools) if tools is not None else None
        self.weights = weights if isinstance(weights, ScoreWeights) else ScoreWeights.model_validate(weights or {})
        self.compare_values = compare_values
        if self.weights.response_quality > 0:
            from reflection.scoring.response import rouge_l_scorer

            rouge_l_scorer(True)  # fail now, not on row 10,000, when the metrics extra is missing

    def score_sample(self, sample: ScoringSample | Mapping[str, Any]) -> SampleRecord:
        """The record for one sample. Raises ValueError when the sample is unusable."""
        if not isinstance(sample, ScoringSample):
            sample = ScoringSample.model_validate(sample)
        inventory = normalize_tools(sample.tools) if sample.tools is not None else self.inventory
        expected = _expected_call(sample.expected)
        predicted = predicted_calls(sample.predicted)
        base: dict[str, Any] = {
            "sample_id": sample.sample_id,
            "query": sample.query,
            "expected_tool": expected.name if expected else None,
            "response_quality": self._response_quality(sample),
        }
        if expected is None:
            if not predicted:
                return SampleRecord(
                    **base, tool_selection_accuracy=True, parameter_accuracy=True, execution_success=True
                )
            first = predicted[0]
            return SampleRecord(
                **base,
                predicted_tool=first.name or None,
                error=f"called {first.name!r} when no call was expected"
                if first.name
                else f"made a call when none was expected ({first.error})",
            )
        if not predicted:
            return SampleRecord(**base, no_call=True, error=f"no tool call was made; expected {expected.name!r}")
        known = inventory is not None and bool(inventory.tools)
        # Several calls: the best-scoring call to the expected tool counts, so the order of the
        # calls never changes a score; without one, a call to an unknown tool is reported first.
        candidates = [c for c in predicted if c.name == expected.name]
        if not candidates:
            unknown = [c for c in predicted if known and c.name and inventory.get(c.name) is None]  # type: ignore[union-attr]
            candidates = unknown[:1] or predicted[:1]
        records = [self._record(base, call, expected, inventory, known) for call in candidates]
        return max(records, key=lambda r: (r.parameter_accuracy, r.execution_success, r.error is None))

    def _record(
        self, base: dict[str, Any], call: ToolCall, expected: ToolCall, inventory: ToolInventory | None, known: bool
    ) -> SampleRecord:
        base = {**base, "predicted_tool": call.name or None}
        # A call to the expected tool is never "unknown": then the inventory is what is incomplete.
        if known and call.name and call.name != expected.name and inventory.get(call.name) is None:  # type: ignore[union-attr]
            return SampleRecord(**base, unknown_tool=True, error=f"called {call.name!r}, which is not in the inventory")
        if call.error is not None or call.arguments is None:
            return SampleRecord(
                **base,
                tool_selection_accuracy=bool(call.name) and call.name == expected.name,
                error=call.error or "the call's arguments could not be read",
            )
        spec = inventory.get(expected.name) if inventory is not None else None
        selected = call.name == expected.name
        params_ok = _parameters_match(call, expected, spec, self.compare_values)
        valid, problem = _schema_valid(call, spec)
        return SampleRecord(
            **base,
            tool_selection_accuracy=selected,
            parameter_accuracy=params_ok,
            execution_success=selected and (params_ok if valid is None else valid),
            error=problem,
        )

    def evaluate(self, samples: Iterable[ScoringSample | Mapping[str, Any]]) -> DatasetReport:
        """Score every sample; an unusable sample becomes an unscored record, never a crash."""
        records: list[SampleRecord] = []
        for index, sample in enumerate(samples):
            try:
                records.append(self.score_sample(sample))
            except ValueError as exc:  # pydantic.ValidationError is a ValueError
                sample_id = _sample_id(sample, index)
                records.append(
                    SampleRecord(sample_id=sample_id, error=f"unusable sample: {_first_line(exc)}", scored=False)
                )
        return self.report(records)

    def report(self, records: Iterable[SampleRecord]) -> DatasetReport:
        """Aggregate records (e.g. from `score_sample` calls spread over workers) into a report."""
        records = tuple(records)
        scored = [r for r in records if r.scored]

        def mean(name: str) -> float | None:
            return math.fsum(float(getattr(r, name)) for r in scored) / len(scored) if scored else None

        quality = [r.response_quality for r in scored if r.response_quality is not None]
        response_quality = math.fsum(quality) / len(quality) if quality else None
        means = {name: mean(name) for name in METRICS[:3]}
        overall = None
        if scored:
            # With a positive weight, a sample without a response to compare earns 0 quality.
            quality_all = math.fsum(r.response_quality or 0.0 for r in scored) / len(scored)
            overall = math.fsum(
                [getattr(self.weights, name) * means[name] for name in METRICS[:3]]
                + [self.weights.response_quality * quality_all]
            )
        return DatasetReport(
            samples=len(records),
            scored=len(scored),
            **means,
            response_quality=response_quality,
            overall_score=overall,
            interpretation=interpret_score(overall) if overall is not None else None,
            weights=self.weights,
            no_call=sum(r.no_call for r in records),
            unknown_tool=sum(r.unknown_tool for r in records),
            errors=sum(r.error is not None for r in records),
            records=records,
        )

    def _response_quality(self, sample: ScoringSample) -> float | None:
        if sample.expected_response is None or sample.response is None:
            return None
        from reflection.scoring.response import rouge_l

        try:
            return rouge_l(sample.response, sample.expected_response)
        except ImportError:
            if self.weights.response_quality > 0:
                raise
            return None


def evaluate_tool_calls(
    samples: Iterable[ScoringSample | Mapping[str, Any]],
    tools: Any = None,
    *,
    weights: ScoreWeights | Mapping[str, float] | None = None,
    compare_values: bool = False,
) -> DatasetReport:
    """Score a dataset in one call: `ToolCallingEvaluator(tools, ...).evaluate(samples)`."""
    return ToolCallingEvaluator(tools, weights=weights, compare_values=compare_values).evaluate(samples)


# --- helpers ---------------------------------------------------------------------------------


def _expected_call(raw: Any) -> ToolCall | None:
    if raw is None or raw == []:
        return None
    calls = read_calls(raw)
    if len(calls) != 1:
        raise ValueError(
            f"expected one reference call, got {len(calls)}; score multi-call samples with trajectory_correctness"
        )
    if calls[0].error is not None or calls[0].arguments is None:
        raise ValueError(f"the reference call is not readable: {calls[0].error}")
    return calls[0]


def _parameters_match(call: ToolCall, expected: ToolCall, spec: ToolSpec | None, compare_values: bool) -> bool:
    args = call.arguments or {}
    expected_args = expected.arguments or {}
    if spec is not None:
        schema = spec.parameters
        required = [r for r in schema.get("required", []) if isinstance(r, str)]
        properties: dict[str, Any] = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
        types = {k: v.get("type") for k, v in properties.items() if isinstance(v, dict)}
    else:
        # No schema for the expected tool: its reference arguments are the required ones,
        # with the JSON types of the reference values (any number fits a number).
        required = list(expected_args)
        types = {
            k: "number" if json_type(v) in ("integer", "number") else json_type(v) for k, v in expected_args.items()
        }
    if any(name not in args for name in required):
        return False
    if any(not matches_type(value, types.get(name)) for name, value in args.items() if name in types):
        return False
    if compare_values:
        schema_for_defaults = spec.parameters if spec is not None else None
        filled = with_defaults(args, schema_for_defaults)
        wanted = with_defaults(expected_args, schema_for_defaults)
        return all(name in filled and json_equal(filled[name], value) for name, value in wanted.items())
    return True


def _schema_valid(call: ToolCall, spec: ToolSpec | None) -> tuple[bool | None, str | None]:
    """(valid, problem) from reflection's static checks against the expected tool's spec;
    (None, None) when there is no spec to check against."""
    if spec is None:
        return None, None
    from reflection.static import check_call

    result = check_call(ToolCall(name=spec.name, arguments=call.arguments), ToolInventory(tools=(spec,)))
    if result.valid:
        return True, None
    finding = result.findings()[0]
    return False, f"arguments are not valid for {spec.name!r}: {finding.path}: {finding.message}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _sample_id(sample: Any, index: int) -> str:
    if isinstance(sample, ScoringSample):
        return sample.sample_id
    if isinstance(sample, Mapping):
        for key in ("sample_id", "id"):
            if sample.get(key) is not None:
                return str(sample[key])
    return f"#{index}"
