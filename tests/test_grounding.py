"""Deterministic provenance of argument values."""

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from reflection.formats import normalize_call, normalize_history, normalize_tools
from reflection.model import ValueSource
from reflection.grounding import _Conversation, _same, ground_call

TOOLS = normalize_tools([{"name": "book", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "nights": {"type": "integer"}, "tier": {"type": "string", "enum": ["basic", "gold"]},
    "currency": {"type": "string", "default": "EUR"}, "guests": {"type": "array", "items": {"type": "string"}}}}}])
HISTORY = normalize_history([
    {"role": "system", "content": "Default hotel tier: gold."},
    {"role": "user", "content": "Hi"},
    {"role": "user", "content": "Book   Lisbon for 3 nights in 2025"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "1", "content": "{\"guest\": \"Ana Silva\"}"},
])


def ground(arguments):
    return {g.path: g for g in ground_call(normalize_call({"name": "book", "arguments": arguments}), HISTORY, TOOLS.get("book"))}


def test_value_from_a_user_turn_names_the_turn_and_quotes_it():
    (source,) = ground({"city": "lisbon"})["$.city"].sources
    assert (source.kind, source.index, source.message_index) == ("user", 1, 2)
    assert "book lisbon for 3 nights" in source.quote


def test_value_from_a_tool_output_names_the_output():
    (source,) = ground({"guests": ["Ana Silva"]})["$.guests[0]"].sources
    assert (source.kind, source.index) == ("tool", 0)


def test_value_from_the_system_prompt():
    sources = ground({"tier": "gold"})["$.tier"].sources
    assert [s.kind for s in sources] == ["system", "enum"]


def test_numbers_match_whole_tokens_only():
    result = ground({"nights": 3, "city": "5"})
    assert result["$.nights"].grounded
    assert not result["$.city"].grounded  # "5" must not match inside "2025"


def test_spec_default_is_a_source():
    assert [s.kind for s in ground({"currency": "EUR"})["$.currency"].sources] == ["default"]


def test_value_found_nowhere_has_no_sources():
    result = ground({"city": "Porto"})["$.city"]
    assert result.sources == () and result.grounded is False


def test_unparseable_call_has_no_grounding():
    call = normalize_call({"name": "book", "arguments": "{oops"})
    assert ground_call(call, HISTORY, TOOLS.get("book")) == ()


def _reference_find(text, needle):
    """The per-message search grounding did before one scan over the joined conversation."""
    if needle[0].isalnum() and needle[-1].isalnum():
        match = re.search(rf"(?<![\w.]){re.escape(needle)}(?![\w])", text)
        start = match.start() if match else -1
    else:
        start = text.find(needle)
    if start < 0:
        return None
    lo, hi = max(0, start - 40), min(len(text), start + len(needle) + 40)
    return ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(texts=st.lists(st.text(alphabet="ab5_.- é2x\n", max_size=120), max_size=5),
       needle=st.text(alphabet="ab5_.- é2x", min_size=1, max_size=4))
def test_one_scan_over_the_conversation_finds_what_a_search_per_message_finds(texts, needle):
    needle = " ".join(needle.split()).lower()
    assume(needle)
    history = normalize_history([{"role": "user", "content": t} for t in texts])
    expected = []
    for index, message in enumerate(history.messages):
        text = " ".join(message.content.split()).lower()
        quote = _reference_find(text, needle) if text else None
        if quote is not None:
            expected.append(ValueSource(kind="user", index=index, message_index=index, quote=quote).model_dump())
    assert _Conversation(history).sources(needle) == expected


@settings(max_examples=300, deadline=None)
@given(value=st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from([1.0, 0.0, 2.5]) | st.text("ab1", max_size=2),
       members=st.lists(st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from([1.0, 0.0, 2.5])
                        | st.text("ab1", max_size=2) | st.lists(st.integers(), max_size=1), max_size=6))
def test_an_enum_source_is_found_exactly_when_a_member_is_the_same_value(value, members):
    tools = normalize_tools([{"name": "t", "parameters": {"type": "object", "properties": {"x": {"enum": members}}}}])
    grounding = ground_call(normalize_call({"name": "t", "arguments": {"x": value}}), normalize_history(None), tools.get("t"))
    expected = any(_same(member, value) for member in members)
    assert any(s.kind == "enum" for s in grounding[0].sources) == expected
