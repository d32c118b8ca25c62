"""The data contract: a reflection's result as plain data, its flat keys and its output row.

One reflection of one call, as plain data, is `ResultData`: what
`ReflectionResult.model_dump(mode="json")` gives, field for field and in field order. The
checker makes this data first (`static.check_call_data`, `grounding.ground`, then
`pipeline.core_data` and, with no judge, `pipeline.reflect_plain`); the Python API builds its
models from it without validating it again (`StaticResult.from_data`,
`ValueGrounding.from_data`), and every output row, whether from plain data (what the CLI
writes) or from models (`rows.result_row`), is made here, once (`output_row`), with its flat
keys computed here, once (`flat_keys`, which `ReflectionResult.flat()` uses too).

A new result field goes into its model (`reflection.model`), into its shape here
(tests/test_results.py holds each shape to its model's fields) and into the function that
makes its data.

In the checker's own data, as opposed to a dump, three things differ, none of them visible
once written: calls (`call`, `correction`) stay `ToolCall` objects, which `rows.line_of`
writes as their fields; sequences may be tuples; constant parts (`CHECK_PASSED`,
`ALL_PASSED`, `ZERO_USAGE`) are shared between results. Such data is written, never
mutated nor handed to users.

Output row (public contract):
    {"id", "overall_valid", "static_<check>"... (1.0 pass / 0.0 fail),
     "semantic_<check>"..., "semantic_avg_score_<category>"... (0-1, when the judge ran),
     "judge_skipped", "warnings", "usage", "latency_ms", "results": [full result per call]}
With `--flat` (`flat_only`), only `id`, `overall_valid` and the flat keys. For a row with
several calls, each flat key is the minimum over its calls and `overall_valid` is False if any
call is invalid, else null if any is unknown, else True. Error rows are `rows.error_row`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypedDict

__all__ = [
    "ALL_PASSED",
    "CHECK_PASSED",
    "FLAT_FIELDS",
    "SEMANTIC_CATEGORIES",
    "SEMANTIC_CHECKS",
    "STATIC_CHECKS",
    "ZERO_USAGE",
    "CallData",
    "CheckData",
    "CoreData",
    "CorrectionData",
    "FindingData",
    "GroundingData",
    "ResultData",
    "SemanticData",
    "SourceData",
    "StaticData",
    "UsageData",
    "combine",
    "flat_keys",
    "output_row",
    "total_usage",
]

# --- the names -------------------------------------------------------------------------------

STATIC_CHECKS: tuple[str, ...] = (
    "non_existent_function",
    "non_existent_parameter",
    "incorrect_parameter_type",
    "missing_required_parameter",
    "allowed_values_violation",
    "json_schema_violation",
    "empty_api_spec",
    "invalid_api_spec",
    "invalid_tool_call",
)
"""The nine static checks, in report order. Names are part of the public contract."""

SEMANTIC_CHECKS: tuple[str, ...] = (
    "general_hallucination_check",
    "general_value_format_alignment",
    "function_selection_appropriateness",
    "agentic_constraints_satisfaction",
)
"""The four judge checks. Names are part of the public contract."""

SEMANTIC_CATEGORIES: dict[str, tuple[str, ...]] = {
    "general": ("general_hallucination_check", "general_value_format_alignment"),
    "function_selection": ("function_selection_appropriateness", "agentic_constraints_satisfaction"),
}
"""Category name -> its checks; each category has a `semantic_avg_score_<category>` flat key."""

# --- the shapes: each is its model's `model_dump(mode="json")`, keys in field order ---------------

Call = Any
"""A proposed call: a `ToolCall` in the checker's own data, its fields (`CallData`) in a dump."""


class CallData(TypedDict):
    """`ToolCall`."""

    name: str
    arguments: dict[str, Any] | None
    id: str | None
    raw_arguments: str | None
    error: str | None


class FindingData(TypedDict):
    """`Finding`: one violation."""

    check: str
    path: str
    message: str
    expected: Any
    actual: Any
    keyword: str | None


class CheckData(TypedDict):
    """`CheckResult`: pass or fail for one named check."""

    passed: bool
    findings: Sequence[FindingData]


class StaticData(TypedDict):
    """`StaticResult`, its computed `valid` last."""

    call: Call
    checks: dict[str, CheckData]
    """Every one of `STATIC_CHECKS`, in that order."""
    warnings: Sequence[str]
    correction: Call | None
    correction_notes: Sequence[str]
    valid: bool


class SourceData(TypedDict):
    """`ValueSource`: one place an argument value was found."""

    kind: Literal["user", "assistant", "tool", "system", "default", "enum"]
    index: int | None
    message_index: int | None
    quote: str


class GroundingData(TypedDict):
    """`ValueGrounding`, its computed `grounded` last."""

    path: str
    value: Any
    sources: Sequence[SourceData]
    grounded: bool


class CorrectionData(TypedDict):
    """`SemanticCorrection`."""

    suggested_arguments: dict[str, Any] | None
    better_function: str | None
    missing_prerequisite: str | None


class SemanticData(TypedDict):
    """`SemanticCheckResult`: one judge check."""

    status: Literal["passed", "failed", "uncertain", "error", "skipped"]
    score: int | None
    confidence: float | None
    evidence: Sequence[str]
    explanation: str
    correction: CorrectionData | None
    error: str | None
    notes: Sequence[str]


class UsageData(TypedDict):
    """`JudgeUsage`."""

    requests: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost_usd: float | None
    prompt_chars: int


class CoreData(TypedDict):
    """The judge-free core of one call's reflection (`pipeline.core_data`): the fields of
    `ResultData` that the static checks and grounding give."""

    call: Call
    static: StaticData
    grounding: Sequence[GroundingData]
    warnings: Sequence[str]


class ResultData(TypedDict):
    """`ReflectionResult`: everything known about one call."""

    call: Call
    static: StaticData
    grounding: Sequence[GroundingData]
    semantic: dict[str, SemanticData]
    judge_skipped: str | None
    overall_valid: bool | None
    usage: UsageData
    warnings: Sequence[str]


# --- shared constant parts (never mutate them) ----------------------------------------------------

CHECK_PASSED: CheckData = {"passed": True, "findings": ()}
"""The passing check, shared by every result that has one."""

ALL_PASSED: dict[str, CheckData] = dict.fromkeys(STATIC_CHECKS, CHECK_PASSED)
"""The checks of a call that passes them all (`flat_keys` knows it by identity)."""

ZERO_USAGE: UsageData = {
    "requests": 0,
    "prompt_tokens": 0,
    "completion_tokens": 0,
    "cached_tokens": 0,
    "cost_usd": 0.0,
    "prompt_chars": 0,
}
"""The usage of a reflection without a judge."""

FLAT_FIELDS: dict[str, Any] = {
    "static": {"checks": {"__all__": {"passed"}}},
    "semantic": {"__all__": {"status", "score"}},
    "overall_valid": True,
}
"""All that `flat_keys` and a flat row read of a result: `model_dump(mode="json", include=FLAT_FIELDS)`
(`ReflectionResult.flat_fields()` builds the same directly)."""

# --- computed once ------------------------------------------------------------------------------

_STATIC_KEYS = tuple((name, f"static_{name}") for name in STATIC_CHECKS)
_ALL_PASS_FLAT = {key: 1.0 for _, key in _STATIC_KEYS}
_SEMANTIC_KEYS = tuple(
    (f"semantic_avg_score_{category}", tuple((name, f"semantic_{name}") for name in names))
    for category, names in SEMANTIC_CATEGORIES.items()
)


def flat_keys(result: ResultData) -> dict[str, float]:
    """The flat float keys of one result, absent when not computed (see README: public contract):
    `static_<check>` 1.0 pass / 0.0 fail; `semantic_<check>` the judge's 1-5 score as 0-1, and
    `semantic_avg_score_<category>` their mean, for the checks that have a score and did not
    error; `overall_valid` 1.0 / 0.0 when known. Reads only `FLAT_FIELDS`."""
    out = _scores(result)
    if out is _ALL_PASS_FLAT:
        out = dict(out)
    verdict = result["overall_valid"]
    if verdict is not None:
        out["overall_valid"] = 1.0 if verdict else 0.0
    return out


def _scores(result: ResultData) -> dict[str, float]:
    """`flat_keys` without `overall_valid` (a row has its own); a shared dict when the call passes
    every static check and had no judge: copy it before changing it."""
    checks = result["static"]["checks"]
    semantic = result["semantic"]
    if checks is ALL_PASSED:
        if not semantic:  # the usual valid call of a static-only run
            return _ALL_PASS_FLAT
        out = dict(_ALL_PASS_FLAT)
    else:
        out = {key: 1.0 if checks[name]["passed"] else 0.0 for name, key in _STATIC_KEYS}
    if semantic:
        for average, names in _SEMANTIC_KEYS:
            scores = []
            for name, key in names:
                check = semantic.get(name)
                if check is None or check["score"] is None or check["status"] == "error":
                    continue
                value = (check["score"] - 1) / 4
                out[key] = value
                scores.append(value)
            if scores:
                out[average] = sum(scores) / len(scores)
    return out


def combine(verdicts: Sequence[bool | None]) -> bool | None:
    """The verdict of several calls: False if any is False, else None if any is unknown, else True."""
    if any(v is False for v in verdicts):
        return False
    if any(v is None for v in verdicts):
        return None
    return True


def total_usage(usages: Sequence[UsageData]) -> UsageData:
    """The field-by-field sum of `usages` (a new dict); the cost is None when any part's cost is."""
    if len(usages) == 1:
        return usages[0].copy()
    if all(usage is ZERO_USAGE for usage in usages):  # static-only calls: nothing to add up
        return ZERO_USAGE.copy()
    total: dict[str, Any] = {}
    for key in ZERO_USAGE:
        values = [usage[key] for usage in usages]  # type: ignore[literal-required]
        total[key] = None if key == "cost_usd" and None in values else sum(values)
    return total  # type: ignore[return-value]


def output_row(
    rid: str, results: ResultData | list[ResultData], *, latency_ms: float | None = None, flat_only: bool = False
) -> dict[str, Any]:
    """The output row of an input row reflected as `results` (one result, or a list for
    several calls); with `flat_only`, just `id`, `overall_valid` and the flat keys (what `--flat`
    writes: verdicts at scale, without the structured results). The row holds `results`
    themselves: from the checker's own data it is to be written (`rows.line_of`), never handed
    to users."""
    if isinstance(results, dict):  # the common case: one call, nothing to combine
        items = [results]
        row: dict[str, Any] = {"id": rid, "overall_valid": results["overall_valid"], **_scores(results)}
        if flat_only:
            return row
        row["judge_skipped"] = results["judge_skipped"] or None
        row["warnings"] = sorted(set(results["warnings"]))
        row["usage"] = dict(results["usage"])
    else:
        items = results
        flat: dict[str, float] = {}
        for result in items:
            for key, value in _scores(result).items():
                flat[key] = min(value, flat.get(key, value))
        row = {"id": rid, "overall_valid": combine([r["overall_valid"] for r in items]), **flat}
        if flat_only:
            return row
        row["judge_skipped"] = "; ".join(sorted({r["judge_skipped"] for r in items if r["judge_skipped"]})) or None
        row["warnings"] = sorted({w for r in items for w in r["warnings"]})
        row["usage"] = total_usage([r["usage"] for r in items])
    row["latency_ms"] = latency_ms
    row["results"] = items
    return row
