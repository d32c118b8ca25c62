"""Properties of the static stage over generated input.

1. Any JSON value as spec and call gives a full result, never an exception.
2. One mutation of a valid call makes exactly the expected check fail, at the expected path.
3. On validity, the static stage agrees with the reference `jsonschema` implementation.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from reflection.model import STATIC_CHECKS, StaticResult
from reflection.static import check_call, check_calls

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- 1. never crashes ------------------------------------------------------------------------

WEIRD_STRINGS = st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "\ud800",
        "\udfff",
        "\u202e",
        "𝔘𝔫𝔦",
        "NaN",
        "Infinity",
        "{",
        '{"a": 1}',
        "[]",
        "null",
        "$ref",
        "#/$defs/x",
        "https://example.com/s.json",
        "a" * 300,
        "\n\t",
        "é",
        "ǅ",
    ]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63, max_value=2**200)
    | st.floats()
    | st.text(max_size=10)
    | WEIRD_STRINGS
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6) | WEIRD_STRINGS, inner, max_size=4),
    max_leaves=20,
)

# Keys the formats and the schema walker look at, so generated specs reach deep code paths.
SPEC_KEYS = st.sampled_from(
    [
        "name",
        "description",
        "parameters",
        "input_schema",
        "inputSchema",
        "function",
        "type",
        "properties",
        "required",
        "items",
        "prefixItems",
        "additionalProperties",
        "$ref",
        "$defs",
        "definitions",
        "anyOf",
        "oneOf",
        "allOf",
        "if",
        "then",
        "else",
        "enum",
        "const",
        "format",
        "minimum",
        "pattern",
        "$schema",
        "patternProperties",
        "dependentSchemas",
        "unevaluatedProperties",
        "not",
    ]
)
SPEC_VALUES = st.sampled_from(
    [
        "object",
        "string",
        "integer",
        "dict",
        "float",
        "tuple",
        "any",
        "function",
        "get",
        "#",
        "#/$defs/a",
        "http://json-schema.org/draft-07/schema#",
        "https://example.com/x",
        "date",
        "^[a-z]+$",
        "(",
    ]
)
SPEC_LIKE = st.recursive(
    SCALARS | SPEC_VALUES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(SPEC_KEYS | st.text(max_size=4), inner, max_size=5),
    max_leaves=25,
)
CALL_LIKE = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {"name": st.sampled_from(["get", "x", "", "function"]) | SCALARS},
        optional={
            "arguments": JSON | JSON.map(json.dumps) | st.text(max_size=20),
            "id": SCALARS,
            "function": SPEC_LIKE,
            "input": JSON,
        },
    ),
)


def assert_complete(result: StaticResult) -> None:
    assert list(result.checks) == list(STATIC_CHECKS)
    for check in result.checks.values():
        assert check.passed == (not check.findings)
        for finding in check.findings:
            assert finding.path.startswith("$") and finding.message
    assert result.valid == all(c.passed for c in result.checks.values())
    if result.correction is not None:
        assert not result.valid
    result.model_dump_json()  # lone surrogates and over-long integers were reported, not kept


@pytest.mark.slow
@SETTINGS
@given(call=CALL_LIKE, tools=JSON | SPEC_LIKE | st.lists(SPEC_LIKE, max_size=4))
def test_any_json_as_spec_and_call_gives_a_complete_result(call, tools):
    assert_complete(check_call(call, tools))
    for result in check_calls(call, tools):
        assert_complete(result)


@pytest.mark.slow
@SETTINGS
@given(arguments=JSON, schema=SPEC_LIKE)
def test_any_json_schema_and_arguments_give_a_complete_result(arguments, schema):
    tools = [{"name": "get", "parameters": schema}]
    assert_complete(check_call({"name": "get", "arguments": arguments}, tools))


# --- 2. one mutation, one failing check ------------------------------------------------------

BASE = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "count": {"type": "integer", "minimum": 0, "maximum": 1000},
        "mode": {"type": "string", "enum": ["fast", "slow", "auto"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
            "required": ["city"],
        },
        "ratio": {"anyOf": [{"type": "number"}, {"type": "null"}]},
    },
    "required": ["name", "count", "address"],
}
TOOLS = [{"type": "function", "function": {"name": "create", "parameters": BASE}}]
TEXT = st.text(min_size=1, max_size=8)
VALID_ARGS = st.fixed_dictionaries(
    {
        "name": TEXT,
        "count": st.integers(0, 1000),
        "address": st.fixed_dictionaries({"city": st.text(max_size=8)}, optional={"zip": st.text(max_size=5)}),
    },
    optional={
        "mode": st.sampled_from(["fast", "slow", "auto"]),
        "tags": st.lists(st.text(max_size=4), max_size=3),
        "ratio": st.none() | st.floats(allow_nan=False, allow_infinity=False),
    },
)
WRONG_TYPE = {  # a value of another JSON type for each location
    ("name",): st.integers() | st.booleans() | st.none(),
    ("count",): st.text(max_size=4) | st.booleans() | st.lists(st.integers(), max_size=2),
    ("mode",): st.integers() | st.none(),
    ("tags",): st.text(max_size=4) | st.integers() | st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    ("address",): st.text(max_size=4) | st.lists(st.integers(), max_size=2),
    ("address", "city"): st.integers() | st.booleans(),
    ("ratio",): st.text(max_size=4) | st.booleans() | st.lists(st.integers(), max_size=2),
}


def failing(result: StaticResult) -> list[str]:
    return [name for name in STATIC_CHECKS if not result.checks[name].passed]


def run(arguments: dict) -> StaticResult:
    return check_call({"name": "create", "arguments": arguments}, TOOLS)


@SETTINGS
@given(arguments=VALID_ARGS)
def test_generated_valid_calls_pass(arguments):
    assert run(arguments).valid


@SETTINGS
@given(arguments=VALID_ARGS, where=st.sampled_from([("name",), ("count",), ("address",), ("address", "city")]))
def test_dropping_a_required_key_fails_only_missing_required_parameter(arguments, where):
    parent = arguments
    for key in where[:-1]:
        parent = parent[key]
    del parent[where[-1]]
    result = run(arguments)
    assert failing(result) == ["missing_required_parameter"]
    assert [f.path for f in result.findings()] == ["$." + ".".join(where)]


FINITE_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10,
)


@SETTINGS
@given(arguments=VALID_ARGS, key=st.text(min_size=1, max_size=8), value=FINITE_JSON)
def test_adding_an_unknown_key_fails_only_non_existent_parameter(arguments, key, value):
    assume(key not in BASE["properties"])
    arguments[key] = value
    result = run(arguments)
    assert failing(result) == ["non_existent_parameter"]
    assert [f.actual for f in result.findings()] == [key]


@SETTINGS
@given(arguments=VALID_ARGS, data=st.data())
def test_changing_a_type_fails_only_incorrect_parameter_type(arguments, data):
    where = data.draw(st.sampled_from(sorted(WRONG_TYPE)))
    parent = arguments
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = data.draw(WRONG_TYPE[where])
    result = run(arguments)
    assert failing(result) == ["incorrect_parameter_type"]
    assert [f.path for f in result.findings()] == ["$." + ".".join(where)]


@SETTINGS
@given(arguments=VALID_ARGS, mode=st.text(max_size=8))
def test_out_of_enum_value_fails_only_allowed_values_violation(arguments, mode):
    assume(mode not in ("fast", "slow", "auto"))
    arguments["mode"] = mode
    assert failing(run(arguments)) == ["allowed_values_violation"]


@SETTINGS
@given(arguments=VALID_ARGS, count=st.integers(max_value=-1) | st.integers(min_value=1001))
def test_out_of_range_value_fails_only_json_schema_violation(arguments, count):
    arguments["count"] = count
    result = run(arguments)
    assert failing(result) == ["json_schema_violation"]
    assert result.findings()[0].keyword in ("minimum", "maximum")


# --- 3. agreement with the reference implementation -----------------------------------------

NAMES = st.sampled_from(["a", "b", "c", "d"])
# Values both implementations judge the same way for the formats used here.
FORMAT_SAMPLES = st.sampled_from(
    ["2024-02-29", "2023-02-29", "2024-13-01", "2024-1-01", "192.168.0.1", "256.1.1.1", "1.2.3", "::1", "abc", ""]
)
SMALL_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.5, -1.5, 2.0, 10**20])
    | st.sampled_from(["", "a", "b", "ab", "ba", "xyz"])
    | FORMAT_SAMPLES
)


def leaf_schemas() -> st.SearchStrategy[dict]:
    bound = st.integers(-2, 2)
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("string")},
            optional={
                "minLength": st.integers(0, 2),
                "maxLength": st.integers(0, 3),
                "pattern": st.sampled_from(["^a", "b$", "^[a-z]*$"]),
                "format": st.sampled_from(["date", "ipv4"]),
            },
        ),
        st.fixed_dictionaries(
            {"type": st.sampled_from(["integer", "number"])},
            optional={"minimum": bound, "maximum": bound, "exclusiveMinimum": bound, "exclusiveMaximum": bound},
        ),
        st.fixed_dictionaries({"type": st.sampled_from(["boolean", "null"])}),
        st.builds(lambda v: {"enum": v}, st.lists(SMALL_SCALARS, min_size=1, max_size=3)),
        st.builds(lambda v: {"const": v}, SMALL_SCALARS),
        st.just({}),
    )


def object_schema(inner: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    def build(props: dict, required: list[str]) -> dict:
        return {
            "type": "object",
            "properties": props,
            "required": [r for r in required if r in props],
            "additionalProperties": False,
        }

    return st.builds(build, st.dictionaries(NAMES, inner, max_size=3), st.lists(NAMES, max_size=2, unique=True))


SCHEMAS = st.recursive(
    leaf_schemas(),
    lambda inner: st.one_of(
        object_schema(inner),
        st.fixed_dictionaries(
            {"type": st.just("array"), "items": inner},
            optional={"minItems": st.integers(0, 2), "maxItems": st.integers(0, 3), "uniqueItems": st.booleans()},
        ),
        st.builds(lambda a, b: {"anyOf": [a, b]}, inner, inner),
        st.builds(lambda a, b: {"oneOf": [a, b]}, inner, inner),
        st.builds(lambda a, b: {"allOf": [a, b]}, inner, inner),
        st.builds(lambda a: {"not": a}, inner),
    ),
    max_leaves=6,
)
TOP_SCHEMAS = object_schema(SCHEMAS)


def near(schema: dict) -> st.SearchStrategy:
    """Instances close to `schema`: mostly the right shape, sometimes not."""
    options = [SMALL_SCALARS]
    if schema.get("type") == "object" or "properties" in schema:
        props = schema.get("properties", {})
        options.append(st.fixed_dictionaries({}, optional={k: near(v) for k, v in props.items()}))
        options.append(st.dictionaries(NAMES, SMALL_SCALARS, max_size=3))
    if schema.get("type") == "array":
        options.append(st.lists(near(schema["items"]), max_size=3))
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options.extend(near(branch) for branch in schema[key])
    if "enum" in schema:
        options.append(st.sampled_from(schema["enum"]))
    if "const" in schema:
        options.append(st.just(schema["const"]))
    return st.one_of(*options)


@st.composite
def schema_and_arguments(draw: st.DrawFn) -> tuple[dict, dict]:
    schema = draw(TOP_SCHEMAS)
    props = schema["properties"]
    arguments = draw(
        st.fixed_dictionaries({}, optional={k: near(v) for k, v in props.items()})
        | st.dictionaries(NAMES, SMALL_SCALARS, max_size=3)
    )
    return schema, arguments


REFERENCE = jsonschema.Draft202012Validator


@pytest.mark.slow
@SETTINGS
@given(case=schema_and_arguments())
def test_validity_agrees_with_the_reference_implementation(case):
    schema, arguments = case
    expected = REFERENCE(schema, format_checker=REFERENCE.FORMAT_CHECKER).is_valid(arguments)
    result = check_call({"name": "t", "arguments": arguments}, [{"name": "t", "parameters": schema}])
    assert result.valid == expected, (schema, arguments, result.findings())


# --- 4. a call the schema accepts is never refused, never rewritten (issue 21, item 3) --------

# Top-level names never occur elsewhere in a generated schema (not as values, $defs keys, anchors
# or nested names), so "the schema mentions it" means "the schema defines it somewhere".
TOP_NAMES = ["alpha", "bravo", "charlie", "delta"]
UNDEFINED = "echo"  # never in any schema
NESTED_NAMES = ["papa", "quebec"]


def _value_schema(names: list[str]) -> st.SearchStrategy[dict]:
    def objects(inner: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
        return st.builds(
            lambda props, closed: {
                "type": "object",
                "properties": props,
                **({"additionalProperties": False} if closed else {}),
            },
            st.dictionaries(st.sampled_from(NESTED_NAMES), inner, max_size=2),
            st.booleans(),
        )

    return st.recursive(
        leaf_schemas(),
        lambda inner: objects(inner) | st.builds(lambda a, b: {"anyOf": [a, b]}, inner, inner),
        max_leaves=4,
    )


def _place_schema() -> st.SearchStrategy[Any]:
    """Schemas for the arguments object itself: properties, requirements, branches, references
    (a ("REF", style, target) marker, written out by `_with_defs`)."""
    names = st.sampled_from(TOP_NAMES)
    leaf = st.fixed_dictionaries(
        {},
        optional={
            "properties": st.dictionaries(names, _value_schema(TOP_NAMES), max_size=3),
            "required": st.lists(names, max_size=2, unique=True),
            "dependentRequired": st.dictionaries(names, st.lists(names, max_size=2, unique=True), max_size=1),
            "minProperties": st.integers(0, 2),
        },
    )
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.builds(lambda base, more: {**base, "allOf": more}, leaf, st.lists(inner, min_size=1, max_size=2)),
            st.builds(lambda base, more: {**base, "anyOf": more}, leaf, st.lists(inner, min_size=1, max_size=2)),
            st.builds(lambda base, more: {**base, "oneOf": more}, leaf, st.lists(inner, min_size=1, max_size=2)),
            st.builds(lambda base, a, b: {**base, "if": a, "then": b}, leaf, inner, inner),
            st.builds(lambda base, a, b: {**base, "if": a, "else": b}, leaf, inner, inner),
            st.builds(lambda base, key, sub: {**base, "dependentSchemas": {key: sub}}, leaf, names, inner),
            st.builds(lambda base, sub: {**base, "not": sub}, leaf, inner),
            st.builds(
                lambda style, target: ("REF", style, target), st.sampled_from(["pointer", "anchor", "id"]), inner
            ),
        ),
        max_leaves=5,
    )


def _with_defs(tree: Any) -> dict:
    """The generated schema with every reference marker turned into a `$ref` to a `$defs` entry
    (each entry referred to exactly where it was generated, so every one is used)."""
    defs: dict[str, Any] = {}
    base = "https://example.com/root.json"

    def walk(node: Any, nested: bool) -> Any:
        # `nested`: inside a definition with its own $id, where "#..." would name that resource.
        if isinstance(node, tuple):
            _, style, target = node
            name = f"d{len(defs)}"
            defs[name] = None  # reserved before the target's own references are numbered
            defs[name] = body = walk(target, nested or style == "id")
            prefix = base if nested else ""
            if style == "anchor":
                body["$anchor"] = f"anchor{name}"
                return {"$ref": f"{prefix}#anchor{name}"}
            if style == "id":
                body["$id"] = f"{name}.json"
                return {"$ref": f"{name}.json"}
            return {"$ref": f"{prefix}#/$defs/{name}"}
        if isinstance(node, dict):
            return {k: walk(v, nested) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, nested) for v in node]
        return node

    root = walk(tree, False)
    return {"$id": base, "type": "object", **root, **({"$defs": defs} if defs else {})}


def _mentions(node: Any, name: str) -> bool:
    if isinstance(node, dict):
        return any(key == name or _mentions(value, name) for key, value in node.items())
    if isinstance(node, list):
        return any(_mentions(item, name) for item in node)
    return node == name


@SETTINGS
@given(
    tree=_place_schema(), arguments=st.dictionaries(st.sampled_from([*TOP_NAMES, UNDEFINED]), SMALL_SCALARS, max_size=4)
)
def test_a_call_the_validator_accepts_is_never_refused_or_rewritten_for_a_name_the_schema_defines(tree, arguments):
    schema = _with_defs(tree)
    if not REFERENCE(schema, format_checker=REFERENCE.FORMAT_CHECKER).is_valid(arguments):
        return
    result = check_call({"name": "t", "arguments": arguments}, [{"name": "t", "parameters": schema}])
    defined = {name for name in arguments if _mentions(schema, name)}
    assert set(failing(result)) <= {"non_existent_parameter"}, (schema, arguments, result.findings())
    flagged = {f.actual for f in result.checks["non_existent_parameter"].findings}
    assert not flagged & defined, (schema, arguments, flagged)
    if defined == set(arguments):
        assert result.valid and result.correction is None, (schema, arguments, result.findings())
    if result.correction is not None:
        assert result.correction.name == "t"
        assert {k: v for k, v in result.correction.arguments.items()} == {
            k: v for k, v in arguments.items() if k not in flagged
        }
        assert defined <= set(result.correction.arguments)
