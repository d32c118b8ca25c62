"""The data contract (`reflection.results`): each shape is its model's dump, the flat keys and
the output row are computed once for plain data and models alike, and the core modules import
each other without a circle."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from reflection import model, results, semantic
from reflection.model import (
    CheckResult,
    Finding,
    JudgeUsage,
    ReflectionResult,
    SemanticCheckResult,
    SemanticCorrection,
    StaticResult,
    ToolCall,
    ValueGrounding,
    ValueSource,
)
from reflection.pipeline import Reflector, reflect_plain
from reflection.rows import line_of, result_row
from reflection.static import check_call

TOOLS = [
    {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}},
            "required": ["city"],
        },
    }
]
HISTORY = [{"role": "user", "content": "Weather in Paris, in c please"}]
CALLS = [
    {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}},
    {"name": "get_weather", "arguments": {"city": 5, "unit": "k"}},
]

_CALL = ToolCall(name="get_weather", arguments={"city": "Paris"}, id="c1")
_FAILING = CheckResult(passed=False, findings=(Finding(check="x", path="$", message="m"),))


def _semantic(status: str, score: int | None) -> SemanticCheckResult:
    return SemanticCheckResult(
        status=status,
        score=score,
        confidence=0.9,
        evidence=("quote",),  # type: ignore[arg-type]
        explanation="why",
        correction=SemanticCorrection(better_function="f"),
    )


def _result(
    static_ok: bool = True,
    semantic: dict[str, SemanticCheckResult] | None = None,
    overall: bool | None = True,
    usage: JudgeUsage | None = None,
    skipped: str | None = None,
) -> ReflectionResult:
    checks = {name: model.PASSED for name in results.STATIC_CHECKS}
    if not static_ok:
        checks["incorrect_parameter_type"] = _FAILING
    return ReflectionResult(
        call=_CALL,
        static=StaticResult(call=_CALL, checks=checks, correction=_CALL, correction_notes=("n",)),
        grounding=(
            ValueGrounding(
                path="$.city",
                value="Paris",
                sources=(ValueSource(kind="user", index=0, message_index=0, quote="paris"),),
            ),
        ),
        semantic=semantic or {},
        judge_skipped=skipped,
        overall_valid=overall,
        usage=usage or JudgeUsage(),
        warnings=("w",),
    )


# --- the shapes are the models' dumps -------------------------------------------------------------


def _keys(shape: Any) -> list[str]:
    return list(shape.__annotations__)


@pytest.mark.parametrize(
    ("shape", "dumped"),
    [
        (results.CallData, _CALL),
        (results.FindingData, Finding(check="c", path="$", message="m")),
        (results.CheckData, _FAILING),
        (results.StaticData, _result().static),
        (results.SourceData, ValueSource(kind="user")),
        (results.GroundingData, ValueGrounding(path="$.a", value=1)),
        (results.CorrectionData, SemanticCorrection()),
        (results.SemanticData, _semantic("passed", 5)),
        (results.UsageData, JudgeUsage()),
        (results.ResultData, _result()),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_each_shape_lists_its_models_dump_keys_in_order(shape, dumped):
    assert _keys(shape) == list(dumped.model_dump(mode="json"))


def test_the_core_is_the_judge_free_part_of_a_result_in_its_order():
    core = _keys(results.CoreData)
    assert core == [key for key in _keys(results.ResultData) if key in core]
    assert set(core) == {"call", "static", "grounding", "warnings"}


def test_the_shared_constants_are_the_defaults_of_their_models():
    assert results.ZERO_USAGE == JudgeUsage().model_dump() and list(results.ZERO_USAGE) == list(JudgeUsage.model_fields)
    assert results.CHECK_PASSED == model.PASSED.model_dump(mode="json") | {"findings": ()}
    assert list(results.ALL_PASSED) == list(results.STATIC_CHECKS)


def test_old_import_paths_still_work():
    assert model.STATIC_CHECKS is results.STATIC_CHECKS and model.SEMANTIC_CATEGORIES is results.SEMANTIC_CATEGORIES
    assert semantic.CheckReply is model.CheckReply


# --- the models built from the data are the validated ones -----------------------------------------


def test_a_static_result_from_data_is_the_validated_one():
    for arguments in ({"city": "Paris"}, {"city": 5, "unit": "k", "extra": 1}):
        built = check_call({"name": "get_weather", "arguments": arguments}, TOOLS)
        validated = StaticResult.model_validate(built.model_dump(exclude={"valid"}))
        assert built == validated and built.model_dump() == validated.model_dump()


# --- flat keys, once ------------------------------------------------------------------------------


def test_flat_keys_of_a_judged_result():
    judged = _result(
        semantic={
            "general_hallucination_check": _semantic("failed", 2),
            "general_value_format_alignment": _semantic("passed", 5),
            "function_selection_appropriateness": _semantic("error", 4),
            "agentic_constraints_satisfaction": _semantic("uncertain", 3),
        },
        overall=None,
    )
    expected = {
        **{f"static_{name}": 1.0 for name in results.STATIC_CHECKS},
        "semantic_general_hallucination_check": 0.25,
        "semantic_general_value_format_alignment": 1.0,
        "semantic_avg_score_general": 0.625,
        "semantic_agentic_constraints_satisfaction": 0.5,
        "semantic_avg_score_function_selection": 0.5,
    }
    assert judged.flat() == expected and list(judged.flat()) == list(expected)
    assert results.flat_keys(judged.model_dump(mode="json")) == expected
    assert judged.flat_fields() == judged.model_dump(mode="json", include=results.FLAT_FIELDS)
    failed = _result(static_ok=False, overall=False).flat()
    assert failed["static_incorrect_parameter_type"] == 0.0 and failed["overall_valid"] == 0.0


# --- one output row for models and plain data --------------------------------------------------------


def test_a_row_of_several_results_combines_them():
    priced = JudgeUsage(
        requests=2, prompt_tokens=10, completion_tokens=3, cached_tokens=1, cost_usd=0.5, prompt_chars=40
    )
    unpriced = JudgeUsage(requests=1, prompt_tokens=5, completion_tokens=2, cost_usd=None, prompt_chars=9)
    first = _result(semantic={"general_hallucination_check": _semantic("passed", 5)}, usage=priced, skipped="b")
    second = _result(
        static_ok=False,
        semantic={"general_hallucination_check": _semantic("failed", 1)},
        overall=False,
        usage=unpriced,
        skipped="a",
    )
    row = result_row("r", [first, second], latency_ms=1.5)
    assert row["overall_valid"] is False and row["static_incorrect_parameter_type"] == 0.0
    assert row["semantic_general_hallucination_check"] == 0.0 and "overall_valid" not in list(row)[2:]
    assert row["judge_skipped"] == "a; b" and row["warnings"] == ["w"] and row["latency_ms"] == 1.5
    assert row["usage"] == {
        "requests": 3,
        "prompt_tokens": 15,
        "completion_tokens": 5,
        "cached_tokens": 1,
        "cost_usd": None,
        "prompt_chars": 49,
    }
    assert JudgeUsage.total([priced, unpriced]).model_dump() == row["usage"]
    assert JudgeUsage.total([priced, priced]).cost_usd == 1.0 and JudgeUsage.total([]) == JudgeUsage()
    assert row["results"] == [first.model_dump(mode="json"), second.model_dump(mode="json")]
    assert result_row("r", [first, second], flat_only=True) == {key: row[key] for key in list(row)[:-5]}


def test_a_row_made_from_models_is_the_users_own():
    row = result_row("r", _result())
    row["usage"]["requests"] = 99
    row["results"][0]["static"]["checks"]["non_existent_function"]["passed"] = False
    assert result_row("r", _result())["usage"] == results.ZERO_USAGE == JudgeUsage().model_dump()
    assert results.CHECK_PASSED["passed"] is True


@pytest.mark.parametrize("call", [CALLS[0], CALLS[1], CALLS], ids=["valid", "invalid", "parallel"])
@pytest.mark.parametrize("flat", [False, True], ids=["full", "flat"])
def test_plain_data_and_models_give_the_same_line(call, flat):
    plain = reflect_plain(call, TOOLS, HISTORY, grounding=not flat)

    async def reflect() -> Any:
        async with Reflector() as reflector:
            return await reflector.reflect(call, TOOLS, HISTORY)

    models = anyio.run(reflect)
    assert line_of(results.output_row("r", plain, flat_only=flat)) == line_of(result_row("r", models, flat_only=flat))
