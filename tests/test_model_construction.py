"""The checker builds its result objects without validation: they must be the objects validation makes."""

from __future__ import annotations

import copy
import pickle

import pydantic
import pytest

from reflection.formats import normalize_call
from reflection.gate import Decision
from reflection.model import (
    CheckResult,
    Finding,
    ReflectionResult,
    StaticResult,
    ToolCall,
    ToolSpec,
    trusted,
)
from reflection.static import check_call

_CALL = ToolCall(name="get_weather", arguments={"city": "Paris"}, id="c1")
_FINDING = {
    "check": "incorrect_parameter_type",
    "path": "$.days",
    "message": "m",
    "expected": "integer",
    "actual": "string",
    "keyword": "type",
}
_CHECK = {"passed": False, "findings": (Finding(**_FINDING),)}

CASES = [
    (ToolCall, {"name": "w"}),
    (
        ToolCall,
        {"name": "w", "arguments": {"a": [1, {"b": None}]}, "id": "x", "raw_arguments": '{"a": 1}', "error": None},
    ),
    (Finding, _FINDING),
    (Finding, {"check": "c", "path": "$", "message": "m"}),
    (CheckResult, {"passed": True}),
    (CheckResult, _CHECK),
    (StaticResult, {"call": _CALL, "checks": {"invalid_tool_call": CheckResult(**_CHECK)}, "warnings": ("w",)}),
    (
        StaticResult,
        {
            "call": _CALL,
            "checks": {"x": CheckResult(passed=True)},
            "warnings": (),
            "correction": _CALL,
            "correction_notes": ("n",),
        },
    ),
]


_STATIC = StaticResult(call=_CALL, checks={"x": CheckResult(passed=True)}, warnings=())
_RESULT = ReflectionResult(call=_CALL, static=_STATIC, judge_skipped="no judge configured", overall_valid=True)
CASES += [
    # What the gate builds for every decision (`Gate._decide_traced`, `Gate._finish`).
    (ReflectionResult, {"call": _CALL, "static": _STATIC, "grounding": (), "warnings": ("w",), "overall_valid": True}),
    (ReflectionResult, {"call": _CALL, "static": _STATIC, "judge_skipped": "static checks failed"}),
    (
        Decision,
        {
            "action": "allow",
            "call": {"name": "get_weather", "arguments": {"city": "Paris"}},
            "feedback": None,
            "reason": "valid",
            "result": _RESULT,
            "latency_ms": 0.5,
            "cost_usd": 0.0,
            "shadow_action": None,
            "tool": "get_weather",
        },
    ),
    (Decision, {"action": "deny", "call": None, "reason": "r", "latency_ms": 1.0, "tool": "t", "feedback": "f"}),
]


@pytest.mark.parametrize(("cls", "values"), CASES)
def test_a_trusted_model_is_the_validated_one(cls, values):
    made, validated = trusted(cls, **values), cls(**values)
    assert type(made) is cls
    assert made == validated and validated == made
    assert list(made.__dict__) == list(validated.__dict__) == list(cls.model_fields)
    assert made.model_fields_set == validated.model_fields_set
    for options in ({}, {"mode": "json"}, {"exclude_unset": True}, {"exclude_defaults": True}):
        assert made.model_dump(**options) == validated.model_dump(**options)
    assert made.model_dump_json() == validated.model_dump_json()
    assert repr(made) == repr(validated)
    assert pickle.loads(pickle.dumps(made)) == validated
    assert copy.deepcopy(made) == validated and made.model_copy() == validated
    with pytest.raises(pydantic.ValidationError):
        made.__setattr__(next(iter(cls.model_fields)), None)  # still frozen


def test_a_default_factory_gives_each_object_its_own_value():
    first, second = trusted(ToolSpec, name="t"), trusted(ToolSpec, name="t")
    assert first == ToolSpec(name="t") and first.model_fields_set == {"name"}
    assert first.parameters == {"type": "object", "properties": {}}
    assert first.parameters is not second.parameters
    given = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert trusted(ToolSpec, name="t", parameters=given).parameters is given


def test_a_result_survives_validation_unchanged():
    result = check_call(
        {"name": "get_weather", "arguments": {"city": 5, "x": 1}},
        [{"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    )
    assert not result.valid and result.correction is not None
    again = StaticResult.model_validate(result.model_dump(exclude={"valid"}))
    assert again == result and again.model_dump() == result.model_dump()


class _Str(str):
    pass


class _Dict(dict):
    pass


@pytest.mark.parametrize(
    "raw",
    [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris", "days": [1, 2.5]}},
        {"name": "get_weather"},
        {"name": "get_weather", "arguments": "{bad"},
    ],
)
def test_a_call_read_from_plain_json_is_the_validated_call(raw):
    call = normalize_call(raw)
    assert call == ToolCall(**call.model_dump())
    given = {"name", "id", "arguments"} | ({"raw_arguments", "error"} if len(raw) > 1 else set())
    assert call.model_fields_set == given  # the keywords normalize_call passes, as before
    if isinstance(raw.get("input"), dict):
        assert call.arguments == raw["input"] and call.arguments is not raw["input"]  # copied, as validation does


def test_subclassed_json_values_are_validated_into_exact_types():
    call = normalize_call(_Dict(name=_Str("get_weather"), arguments=_Dict({_Str("city"): _Str("Paris")}), id=_Str("c")))
    assert call == ToolCall(name="get_weather", arguments={"city": "Paris"}, id="c")
    assert type(call.name) is str and type(call.arguments) is dict and type(call.id) is str
    assert all(type(key) is str for key in call.arguments)
