"""Bounded validation work per row (issue 22, item 2): a schema whose references multiply is an
`invalid_api_spec` before any value is validated, in-place loops too, and the errors classified
per call stop at `MAX_ERRORS`. Asserted on results and on counts, never on time."""

from __future__ import annotations

import json

import pytest

from reflection import _schemas, static
from reflection._schemas import MAX_EXPANSION, expansion
from reflection.model import STATIC_CHECKS, StaticResult
from reflection.static import MAX_ERRORS, check_call


def laughs(levels: int, keyword: str = "allOf") -> dict:
    """A "billion laughs" schema: each level refers to the next twice."""
    defs = {f"l{i}": {keyword: [{"$ref": f"#/$defs/l{i + 1}"}, {"$ref": f"#/$defs/l{i + 1}"}]} for i in range(levels)}
    defs[f"l{levels}"] = {"type": "string"}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/l0"}}, "$defs": defs}


def subschemas(node) -> int:
    if isinstance(node, dict):
        return 1 + sum(subschemas(v) for k, v in node.items() if k not in ("type",))
    if isinstance(node, list):
        return sum(subschemas(v) for v in node)
    return 0


def check(schema: dict, arguments: dict) -> StaticResult:
    return check_call({"name": "t", "arguments": arguments}, [{"name": "t", "parameters": schema}])


def failing(result: StaticResult) -> list[str]:
    return [name for name in STATIC_CHECKS if not result.checks[name].passed]


class Counter:
    def __init__(self, real):
        self.real, self.calls = real, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.real(*args, **kwargs)


@pytest.mark.parametrize(("levels", "keyword"), [(18, "allOf"), (39, "allOf"), (18, "anyOf"), (18, "oneOf")])
def test_a_schema_whose_references_multiply_is_an_invalid_spec_and_no_value_is_validated(monkeypatch, levels, keyword):
    schema = laughs(levels, keyword)
    assert len(json.dumps(schema)) < 75 * levels  # small to send (1.3 KB at 18 levels), exponential to expand
    kids = Counter(_schemas._kids)
    arguments_checked = Counter(static._check_arguments)
    monkeypatch.setattr(_schemas, "_kids", kids)
    monkeypatch.setattr(static, "_check_arguments", arguments_checked)
    result = check(schema, {"x": 1})
    assert failing(result) == ["invalid_api_spec"]
    (finding,) = result.checks["invalid_api_spec"].findings
    assert "expands too far" in finding.message and f"{MAX_EXPANSION:,}" in finding.message
    assert arguments_checked.calls == 0
    assert kids.calls <= subschemas(schema)  # each subschema visited once: linear in the schema


def test_a_schema_just_under_the_bound_is_checked_as_usual():
    schema = laughs(11)  # about 2**13 evaluations at one place: allowed
    assert expansion(schema, "2020-12", None)[0] <= MAX_EXPANSION
    assert check(schema, {"x": "a"}).valid
    assert failing(check(schema, {"x": 1})) == ["incorrect_parameter_type"]


def test_references_that_multiply_one_level_down_are_bounded_too():
    # `items` and `contains` both apply to each item: evaluations double with every level of nesting.
    schema = {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/l"}},
        "$defs": {"l": {"type": "array", "items": {"$ref": "#/$defs/l"}, "contains": {"$ref": "#/$defs/l"}}},
    }
    assert failing(check(schema, {"x": []})) == ["invalid_api_spec"]


@pytest.mark.parametrize(
    "schema",
    [
        {
            "type": "object",
            "properties": {"tree": {"$ref": "#/$defs/node"}},
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {
                        "value": {"type": "integer"},
                        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                    },
                }
            },
        },
        {
            "type": "object",
            "properties": {"data": {"$ref": "#/$defs/json"}},
            "$defs": {
                "json": {
                    "anyOf": [
                        {"type": ["string", "number", "boolean", "null"]},
                        {"type": "array", "items": {"$ref": "#/$defs/json"}},
                        {"type": "object", "additionalProperties": {"$ref": "#/$defs/json"}},
                    ]
                }
            },
        },
    ],
    ids=["tree", "any JSON value"],
)
def test_recursive_schemas_that_consume_the_value_are_not_refused(schema):
    arguments = {"tree": {"value": 1, "children": [{"value": 2, "children": []}]}, "data": {"a": [1, {"b": None}]}}
    key = next(iter(schema["properties"]))
    assert check(schema, {key: arguments[key]}).valid


def test_an_in_place_loop_through_a_branch_is_an_invalid_spec():
    schema = {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/a"}},
        "$defs": {"a": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/a"}]}},
    }
    result = check(schema, {"x": 1})
    assert failing(result) == ["invalid_api_spec"]
    message = result.checks["invalid_api_spec"].findings[0].message
    assert "refers back to itself" in message and "#/$defs/a" in message


@pytest.mark.patches_module("reflection.static")
def test_errors_classified_per_call_stop_at_the_bound(monkeypatch):
    classified = Counter(static._classify)
    monkeypatch.setattr(static, "_classify", classified)
    schema = {"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "integer"}}}}
    result = check(schema, {"ids": ["1"] * (MAX_ERRORS + 500)})
    assert classified.calls == MAX_ERRORS
    findings = result.checks["incorrect_parameter_type"].findings
    assert len(findings) == static.MAX_FINDINGS + 1
    assert "more may exist" in findings[-1].message and f"{MAX_ERRORS:,}" in findings[-1].message
    assert result.correction is None  # a partial view is not corrected


def test_below_the_error_bound_the_correction_still_covers_every_error():
    schema = {"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "integer"}}}}
    result = check(schema, {"ids": ["1"] * 300})
    assert result.correction is not None and result.correction.arguments == {"ids": [1] * 300}
    assert "more may exist" not in result.checks["incorrect_parameter_type"].findings[-1].message
