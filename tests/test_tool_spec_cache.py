"""A tool list given as JSON text is normalised spec by spec, each spec once (issue 26): the
inventory is the one the whole list gives when parsed, problems and all."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from reflection.formats import normalize_tools

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "int"}}, "required": ["city"]}
SPECS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": WEATHER}},
    {"name": "search", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}},
    {"name": "fetch", "inputSchema": {"type": "object", "properties": {"url": {"type": "string"}}}},
    {"name": "book", "description": "Book.", "parameters": {"type": "dict", "properties": {"n": {"type": "float"}}}},
    {
        "name": "lookup",
        "parameters": [{"name": "key", "type": "str", "required": True}, {"name": "all", "type": "bool"}],
    },
    {"name": "noargs"},
    # Specs that do not normalise cleanly: the whole-list path reports them, with their index.
    {"name": "get_weather", "parameters": {"type": "object"}},  # a name defined twice when get_weather is there
    {"name": "scalar", "parameters": {"type": "string"}},
    {"description": "a spec without a name"},
    {"name": "listed", "parameters": [{"type": "string"}]},
    {"name": "bad_description", "description": 7},
    "not an object",
    {"type": "web_search"},  # a hosted tool: skipped, its index counted, as on the whole-list path
    {"name": "deep", "parameters": {"type": "object", "properties": {"x": json.loads("[" * 120 + "]" * 120)}}},
    # As deep as a spec may be alone, so one level too deep in a list: the list is read spec by spec.
    {"name": "edge", "parameters": {"type": "object", "properties": {"x": json.loads("[" * 97 + "]" * 97)}}},
]


def text(tools, **options):
    return json.dumps(tools, **options).encode()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(range(len(SPECS))), max_size=8), st.booleans())
def test_a_tool_list_as_text_gives_the_inventory_of_the_list_itself(picks, spaced):
    tools = [SPECS[i] for i in picks]
    options = {} if spaced else {"separators": (",", ":")}
    assert normalize_tools(text(tools, **options)) == normalize_tools(tools)


def test_a_spec_seen_in_one_list_is_the_same_spec_in_another():
    first = normalize_tools(text([SPECS[0], SPECS[1]]))
    second = normalize_tools(text([SPECS[2], SPECS[1], SPECS[0]]))
    assert first.tools[0] is second.tools[2] and first.tools[1] is second.tools[1]


def test_the_same_spec_texts_listed_otherwise_share_one_inventory():
    book, lookup = text(SPECS[3]), text(SPECS[4])
    compact = normalize_tools(b"[" + book + b"," + lookup + b"]")
    spaced = normalize_tools(b" [\n  " + book + b",\n  " + lookup + b"\n]\n")
    assert compact is spaced


def test_a_list_with_a_name_defined_twice_reports_it_as_the_whole_list_does():
    tools = [SPECS[0], {"name": "get_weather", "description": "again"}]
    inventory = normalize_tools(text(tools))
    assert [t.name for t in inventory.tools] == ["get_weather"]
    assert "defined more than once" in inventory.problems[0].message and inventory.problems[0].index == 1


def test_a_list_with_unusable_specs_is_read_spec_by_spec_with_their_indexes(monkeypatch):
    from reflection import formats

    tools = [SPECS[1], {"type": "web_search"}, SPECS[8], SPECS[0], SPECS[6], SPECS[10]]
    expected = normalize_tools(tools)

    def whole(*_):
        raise AssertionError("read whole")

    monkeypatch.setattr(formats, "_text_inventory", whole)
    inventory = normalize_tools(text(tools))
    assert inventory == expected
    assert [(p.index, p.name) for p in inventory.problems] == [(2, None), (4, "get_weather"), (5, "bad_description")]


def test_text_that_is_not_a_list_of_specs_is_read_whole():
    assert normalize_tools(b"[]").empty
    assert normalize_tools(text({"tools": [SPECS[1]]})).tools[0].name == "search"
    assert normalize_tools(text(SPECS[1])).tools[0].name == "search"
    assert "not valid JSON" in normalize_tools(b'[{"name": "x"}').problems[0].message


def test_a_cached_specs_parameters_are_not_walked_again(monkeypatch):
    from reflection import _json

    spec = {"name": "vouched", "parameters": {"type": "object", "properties": {"v": {"type": "integer"}}}}
    parameters = normalize_tools(text([spec])).tools[0].parameters
    normalize_tools(text([SPECS[1]]))  # seen before the walks are stopped

    def walked(*_):
        raise AssertionError("walked again")

    monkeypatch.setattr(_json, "_scan", walked)
    assert _json.require_json_like(parameters, "tools") == _json.PLAIN | _json.FINITE | _json.SOUND
    assert normalize_tools(text([SPECS[1], spec])).tools[1].parameters is parameters


def test_a_tool_list_text_seen_before_gives_the_same_inventory():
    listed = text([SPECS[2], SPECS[0]])
    assert normalize_tools(listed) is normalize_tools(bytes(listed))
