"""JSON reading: strict parsing, rows that keep their tool list as text, and the JSON-like check."""

from __future__ import annotations

import json
import uuid

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reflection._json import (
    FINITE,
    PLAIN,
    SOUND,
    parse_json,
    parse_json_keeping,
    require_json_like,
)
from reflection.formats import normalize_calls, normalize_tools
from reflection.rows import parse_line, read_row
from reflection.static import check_call

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.mark.slow
@given(JSON)
@settings(max_examples=300, deadline=None)
def test_parse_json_reads_back_what_the_standard_library_writes(value):
    assert parse_json(json.dumps(value)) == value


@given(JSON, JSON)
@settings(max_examples=200, deadline=None)
def test_kept_members_are_their_own_json_text_and_the_rest_is_parsed(tools, call):
    row = parse_json_keeping(json.dumps({"id": 1, "tools": tools, "call": call}).encode(), {"tools"})
    assert row["id"] == 1 and row["call"] == call
    assert isinstance(row["tools"], bytes) and parse_json(row["tools"]) == tools


def test_integers_beyond_64_bits_stay_exact():
    assert parse_json('{"n": 123456789012345678901234567890}') == {"n": 123456789012345678901234567890}
    assert parse_json("1" + "0" * 400) == 10**400  # beyond a double's range: still an integer, not infinity


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"a": NaN}', "line 1 column 7"),
        ('{"a": 1} junk', "unexpected content after document"),
        ('["\\ud800"]', "surrogate"),
        ("[1e400]", "infinity"),
    ],
)
def test_errors_name_the_problem_and_where(text, words):
    for parse in (parse_json, lambda t: parse_json_keeping(t.encode(), {"tools"})):
        with pytest.raises(ValueError, match=words):
            parse(text)


def test_a_bad_member_is_reported_at_its_place_in_the_whole_line():
    with pytest.raises(ValueError, match="column 21"):
        parse_json_keeping(b'{"id": 1, "call": ["\\ud800"]}', {"tools"})


def test_a_line_nested_deeper_than_json_parsers_go_is_a_value_error():
    line = b'{"call": ' + b"[" * 3000 + b"]" * 3000 + b"}"
    with pytest.raises(ValueError, match="nesting deeper than 100 levels"):
        parse_json_keeping(line, {"tools"})


def test_a_line_that_is_not_an_object_parses_as_usual():
    assert parse_json_keeping(b"[1, 2]", {"tools"}) == [1, 2]


def test_tools_as_json_text_normalise_like_the_parsed_list_and_are_cached():
    text = json.dumps(TOOLS).encode()
    first = normalize_tools(text)
    assert first == normalize_tools(TOOLS)
    assert normalize_tools(bytes(text)) is first


def test_tools_text_that_is_not_json_is_a_spec_problem():
    inventory = normalize_tools(b"[{")
    assert not inventory.tools and "tool specs are not valid JSON" in inventory.problems[0].message


def test_a_call_as_json_bytes_normalises_like_the_object():
    call = {"name": "get_weather", "arguments": {"city": "Paris"}}
    assert normalize_calls(json.dumps(call).encode()) == normalize_calls(call)


def test_a_row_read_from_its_line_checks_like_the_parsed_row():
    line = json.dumps({"id": "r1", "tools": TOOLS, "call": {"name": "get_weather", "arguments": {"city": 5}}})
    from_line = read_row(parse_line(line.encode()), 1)
    parsed = json.loads(line)
    assert isinstance(from_line.tools, bytes)
    assert check_call(from_line.call, from_line.tools) == check_call(parsed["call"], parsed["tools"])


def test_json_like_check_accepts_str_subclass_keys_and_names_the_first_bad_part():
    class Key(str):
        pass

    require_json_like({Key("k"): [1, {"x": None}]}, "call")
    with pytest.raises(TypeError, match=r"call: .* at \$\.a\[1\] \(UUID\)"):
        require_json_like({"a": [1, uuid.uuid4()]}, "call")
    with pytest.raises(TypeError, match=r"key 2 of type int"):
        require_json_like([[1, {2: 3}]], "call")


class _Float(float):
    pass


class _Str(str):
    pass


def _nested(depth: int, leaf: object) -> object:
    value = leaf
    for _ in range(depth):
        value = {"a": [value]}
    return value


@pytest.mark.parametrize(
    ("value", "flags"),
    [
        ({"a": [1, "x", None, True, 2.5, {"b": ()}]}, PLAIN | FINITE | SOUND),
        ({"a": [1, {"b": float("inf")}]}, PLAIN | SOUND),
        ([float("nan")], PLAIN | SOUND),
        (float("-inf"), PLAIN | SOUND),
        ("text", PLAIN | FINITE | SOUND),
        ({"a": _Float("nan")}, SOUND),  # subclasses go through the exact check
        ({"a": [_Float(1.5)]}, FINITE | SOUND),
        ({_Str("k"): 1}, FINITE | SOUND),
        (_nested(300, 1.0), PLAIN | FINITE),  # deeper than MAX_DEPTH: not sound, walked without recursion
        (_nested(300, _Float(1.0)), FINITE),
        (_nested(300, float("nan")), PLAIN),
        (_nested(49, 1.0), PLAIN | FINITE | SOUND),  # 98 levels
        ({"a": ["\ud800"]}, PLAIN | FINITE),
        ({"\udfff": 1}, PLAIN | FINITE),
        ({"a": [10**4300]}, PLAIN | FINITE),
        ({"a": [10**4300 - 1, -(10**4300) + 1]}, PLAIN | FINITE | SOUND),
    ],
)
def test_json_like_check_also_tells_whether_the_value_is_finite_and_plain(value, flags):
    assert require_json_like(value, "call") == flags


@pytest.mark.parametrize(
    "call",
    [
        {"name": "w", "arguments": {"x": [1, {"y": float("inf")}]}},
        {"type": "tool_use", "id": "t1", "name": "w", "input": {"x": _Float("nan")}},
    ],
)
def test_non_finite_numbers_anywhere_in_object_arguments_are_a_data_error(call):
    assert "NaN or Infinity" in normalize_calls(call)[0].error


def test_non_finite_numbers_outside_the_arguments_do_not_fail_the_call():
    call = {"name": "w", "arguments": {"x": 1}, "extra": float("nan")}
    assert normalize_calls(call)[0].error is None


def test_parse_json_reads_a_raw_member_like_its_bytes():
    for text in (b'{"a": [1, 2.5, "x"]}', b"123456789012345678901234567890", b"[1, 2] junk", b'{"a": NaN}'):
        try:
            expected: object = parse_json(text)
        except ValueError as exc:
            expected = ("error", str(exc))
        try:
            got: object = parse_json(msgspec.Raw(text))
        except ValueError as exc:
            got = ("error", str(exc))
        assert got == expected
