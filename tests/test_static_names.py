"""Which argument names a tool's schema defines: every reference the validator follows, every
in-place branch, required names; a schema with no properties at all accepts any name; and no
correction removes a name the schema defines (issue 21 items 1-3, issue 19 item 2)."""

from __future__ import annotations

import pytest

from reflection._schemas import DRAFT2020, names_at
from reflection.model import STATIC_CHECKS, StaticResult
from reflection.static import check_call

DRAFT7 = "http://json-schema.org/draft-07/schema#"
DRAFT2019 = "https://json-schema.org/draft/2019-09/schema"


def check(schema: dict, arguments: dict) -> StaticResult:
    return check_call({"name": "t", "arguments": arguments}, [{"name": "t", "parameters": schema}])


def failing(result: StaticResult) -> list[str]:
    return [name for name in STATIC_CHECKS if not result.checks[name].passed]


def flagged(result: StaticResult) -> list[str]:
    return [f.actual for f in result.checks["non_existent_parameter"].findings]


# --- 1. names defined through any reference the validator follows ----------------------------

REFERENCED = [
    pytest.param({"$defs": {"p": {"$anchor": "p", "properties": {"foo": {}}}}, "$ref": "#p"}, id="anchor"),
    pytest.param({"$defs": {"p": {"properties": {"foo": {}}}}, "$ref": "#/$defs/p"}, id="pointer"),
    pytest.param({"$defs": {"p": {"properties": {"foo": {}}}}, "$ref": "#/%24defs/p"}, id="percent-encoded pointer"),
    pytest.param(
        {
            "$id": "https://example.com/root.json",
            "$ref": "item.json",
            "$defs": {"i": {"$id": "item.json", "properties": {"foo": {}}}},
        },
        id="$id-relative URI",
    ),
    pytest.param(
        {
            "$id": "https://example.com/root.json",
            "$ref": "https://example.com/item.json",
            "$defs": {"i": {"$id": "https://example.com/item.json", "properties": {"foo": {}}}},
        },
        id="absolute URI",
    ),
    pytest.param(
        {"$ref": "urn:example:item", "$defs": {"i": {"$id": "urn:example:item", "properties": {"foo": {}}}}}, id="URN"
    ),
    pytest.param(
        {
            "$id": "https://example.com/root.json",
            "$ref": "item.json#p",
            "$defs": {"i": {"$id": "item.json", "$defs": {"x": {"$anchor": "p", "properties": {"foo": {}}}}}},
        },
        id="anchor in another resource",
    ),
    pytest.param(
        {
            "$id": "https://example.com/root.json",
            "$ref": "item.json#/$defs/x",
            "$defs": {"i": {"$id": "item.json", "$defs": {"x": {"properties": {"foo": {}}}}}},
        },
        id="pointer in another resource",
    ),
    pytest.param(
        {
            "$dynamicAnchor": "node",
            "$ref": "#/$defs/base",
            "$defs": {
                "base": {"$dynamicRef": "#node", "properties": {"bar": {}}},
                "ext": {"$dynamicAnchor": "node", "properties": {"foo": {}}},
            },
        },
        id="$dynamicRef",
    ),
    pytest.param(
        {
            "$schema": DRAFT2019,
            "$recursiveAnchor": True,
            "$ref": "#/$defs/base",
            "$defs": {"base": {"$recursiveRef": "#", "properties": {"bar": {}}}},
            "properties": {"foo": {}},
        },
        id="$recursiveRef",
    ),
    pytest.param(
        {"$schema": DRAFT7, "$ref": "#foo", "definitions": {"a": {"$id": "#foo", "properties": {"foo": {}}}}},
        id="draft-7 $id anchor",
    ),
    pytest.param({"allOf": [{"properties": {"foo": {}}}], "properties": {"bar": {}}}, id="allOf"),
    pytest.param({"anyOf": [{"properties": {"foo": {}}}, {"properties": {"bar": {}}}]}, id="anyOf"),
    pytest.param(
        {"oneOf": [{"properties": {"foo": {}}, "required": ["foo"]}, {"properties": {"bar": {}}, "required": ["bar"]}]},
        id="oneOf",
    ),
    pytest.param({"if": {"properties": {"bar": {}}}, "then": {"properties": {"foo": {}}}}, id="if-then"),
    pytest.param(
        {"properties": {"bar": {}}, "if": {"required": ["bar"]}, "else": {"properties": {"foo": {}}}}, id="else"
    ),
    pytest.param(
        {"properties": {"bar": {}}, "dependentSchemas": {"bar": {"properties": {"foo": {}}}}}, id="dependentSchemas"
    ),
    pytest.param(
        {"properties": {"bar": {}}, "not": {"properties": {"foo": {"type": "integer"}}, "required": ["foo"]}}, id="not"
    ),
]


@pytest.mark.parametrize("schema", REFERENCED)
def test_a_name_defined_through_a_reference_or_branch_the_validator_follows_is_defined(schema):
    result = check(schema, {"foo": "x"})
    assert result.valid, result.findings()
    assert result.correction is None


@pytest.mark.parametrize("schema", REFERENCED)
def test_a_name_defined_nowhere_still_fails_where_the_schema_has_properties(schema):
    result = check(schema, {"foo": "x", "zzz": 1})
    assert failing(result) == ["non_existent_parameter"] and flagged(result) == ["zzz"]


def test_a_reference_to_the_metaschema_defines_the_keywords():
    schema = {"$ref": "https://json-schema.org/draft/2020-12/schema"}
    assert check(schema, {"minLength": 1}).valid
    assert failing(check(schema, {"minLength": -1})) == ["json_schema_violation"]
    assert flagged(check({**schema, "properties": {"x": {}}}, {"zzz": 1})) == ["zzz"]


def test_draft7_ignores_the_siblings_of_ref_for_names_as_its_validator_does():
    schema = {
        "$schema": DRAFT7,
        "$ref": "#/definitions/a",
        "properties": {"bar": {"type": "string"}},
        "definitions": {"a": {"properties": {"foo": {}}}},
    }
    assert check(schema, {"foo": 1}).valid
    assert flagged(check(schema, {"bar": 1})) == ["bar"]


def test_a_reference_the_name_check_cannot_resolve_leaves_the_object_open():
    # The validator refuses such a schema before names matter; the name check alone never guesses.
    root = {"properties": {"a": {}}, "allOf": [{"$ref": "#/$defs/missing"}, {"$dynamicRef": "https://example.com/x"}]}
    names = names_at(None, root, root, DRAFT2020)
    assert names.open and names.names == ("a",)


def test_names_come_with_the_schemas_own_properties_first():
    root = {"allOf": [{"properties": {"z": {}}}], "properties": {"b": {}, "a": {}}, "required": ["r"]}
    assert names_at(None, root, root, DRAFT2020).names[:2] == ("b", "a")


# --- 2. names the schema requires are defined -------------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "required": ["foo"]},
        {"type": "object", "properties": {"a": {}}, "required": ["foo"]},
        {"type": "object", "properties": {"a": {}}, "dependentRequired": {"a": ["foo"]}},
        {"type": "object", "properties": {"a": {}}, "dependentRequired": {"foo": ["a"]}},
        {"type": "object", "properties": {"a": {}}, "dependencies": {"a": ["foo"]}},
        {"type": "object", "properties": {"a": {}}, "dependentSchemas": {"foo": {"required": ["a"]}}},
        {"type": "object", "properties": {"a": {}}, "allOf": [{"required": ["foo"]}]},
    ],
    ids=[
        "required only",
        "required",
        "dependentRequired value",
        "dependentRequired key",
        "dependencies",
        "dependentSchemas key",
        "required in a branch",
    ],
)
def test_a_name_the_schema_requires_or_depends_on_is_defined(schema):
    result = check(schema, {"a": 1, "foo": "x"})
    assert result.valid, result.findings()


def test_leaving_out_a_required_name_fails_only_missing_required_parameter():
    result = check({"type": "object", "required": ["foo"]}, {})
    assert failing(result) == ["missing_required_parameter"]


# --- issue 19, item 2: no properties at all, any name ------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object"},
        {},
        {"type": "object", "minProperties": 1},
        {"type": "object", "propertyNames": {"maxLength": 10}},
        {"type": "object", "additionalProperties": {"type": ["string", "boolean"]}},
    ],
    ids=["type object", "empty", "minProperties", "propertyNames", "additionalProperties schema"],
)
def test_a_schema_without_properties_accepts_any_argument_names(schema):
    result = check(schema, {"filter": "tmp-*", "dry_run": True})
    assert result.valid and result.correction is None


def test_an_empty_properties_object_still_takes_no_parameters():
    result = check({"type": "object", "properties": {}}, {"path": "/"})
    assert failing(result) == ["non_existent_parameter"]


def test_additional_properties_false_without_properties_allows_no_name():
    result = check({"type": "object", "additionalProperties": False}, {"path": "/", "force": True})
    assert failing(result) == ["non_existent_parameter"] and flagged(result) == ["path", "force"]


def test_every_name_of_a_nested_object_that_allows_none_is_reported():
    # The validator reports such an object once, as a false schema, naming no key.
    schema = {"type": "object", "properties": {"o": {"type": "object", "additionalProperties": False}}}
    result = check(schema, {"o": {"x": 1, "y": 2}})
    assert failing(result) == ["non_existent_parameter"]
    assert [f.path for f in result.findings()] == ["$.o.x", "$.o.y"]
    assert result.correction is not None and result.correction.arguments == {"o": {}}


# --- 3. corrections never remove what the schema defines -----------------------------------------


def test_a_name_defined_in_a_branch_but_rejected_beside_additional_properties_false_is_never_removed():
    # `additionalProperties: false` sees only its sibling `properties`: the validator rejects
    # "b" though the schema defines it; the call cannot pass, and no correction drops "b".
    schema = {
        "type": "object",
        "properties": {"a": {}},
        "allOf": [{"properties": {"b": {"type": "string"}}}],
        "additionalProperties": False,
    }
    result = check(schema, {"a": 1, "b": "x"})
    assert failing(result) == ["non_existent_parameter"]
    assert result.correction is None and result.correction_notes == ()


def test_a_nested_name_defined_through_a_reference_is_never_removed():
    schema = {
        "type": "object",
        "properties": {
            "opts": {
                "type": "object",
                "properties": {"a": {}},
                "allOf": [{"$ref": "#/$defs/extra"}],
                "additionalProperties": False,
            }
        },
        "$defs": {"extra": {"properties": {"b": {}}}},
    }
    result = check(schema, {"opts": {"a": 1, "b": 2}})
    assert failing(result) == ["non_existent_parameter"] and result.correction is None


def test_a_nested_name_defined_nowhere_is_still_suggested_for_removal():
    schema = {
        "type": "object",
        "properties": {"opts": {"type": "object", "properties": {"a": {}}, "additionalProperties": False}},
    }
    result = check(schema, {"opts": {"a": 1, "zzz": 2}})
    assert result.correction is not None and result.correction.arguments == {"opts": {"a": 1}}


def test_the_anchor_example_keeps_its_argument_and_gets_no_correction():
    schema = {"$defs": {"p": {"$anchor": "p", "properties": {"foo": {}}}}, "$ref": "#p"}
    result = check(schema, {"foo": "x"})
    assert result.valid and result.correction is None
