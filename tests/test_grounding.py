"""Deterministic provenance of argument values."""

import re
from bisect import bisect_right
from decimal import Decimal

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from reflection import grounding
from reflection.formats import normalize_call, normalize_history, normalize_tools
from reflection.model import ValueSource
from reflection.grounding import _Conversation, _mark, _number_forms, _same, ground_call

TOOLS = normalize_tools(
    [
        {
            "name": "book",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "nights": {"type": "integer"},
                    "tier": {"type": "string", "enum": ["basic", "gold"]},
                    "currency": {"type": "string", "default": "EUR"},
                    "guests": {"type": "array", "items": {"type": "string"}},
                },
            },
        }
    ]
)
HISTORY = normalize_history(
    [
        {"role": "system", "content": "Default hotel tier: gold."},
        {"role": "user", "content": "Hi"},
        {"role": "user", "content": "Book   Lisbon for 3 nights in 2025"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "1", "content": '{"guest": "Ana Silva"}'},
    ]
)


def ground(arguments):
    return {
        g.path: g
        for g in ground_call(normalize_call({"name": "book", "arguments": arguments}), HISTORY, TOOLS.get("book"))
    }


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
@given(
    texts=st.lists(st.text(alphabet="ab5_.- é2x\n", max_size=120), max_size=5),
    needle=st.text(alphabet="ab5_.- é2x", min_size=1, max_size=4),
)
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
@given(
    value=st.none()
    | st.booleans()
    | st.integers(-2, 2)
    | st.sampled_from([1.0, 0.0, 2.5])
    | st.text("ab1", max_size=2),
    members=st.lists(
        st.none()
        | st.booleans()
        | st.integers(-2, 2)
        | st.sampled_from([1.0, 0.0, 2.5])
        | st.text("ab1", max_size=2)
        | st.lists(st.integers(), max_size=1),
        max_size=6,
    ),
)
def test_an_enum_source_is_found_exactly_when_a_member_is_the_same_value(value, members):
    tools = normalize_tools([{"name": "t", "parameters": {"type": "object", "properties": {"x": {"enum": members}}}}])
    grounding = ground_call(
        normalize_call({"name": "t", "arguments": {"x": value}}), normalize_history(None), tools.get("t")
    )
    expected = any(_same(member, value) for member in members)
    assert any(s.kind == "enum" for s in grounding[0].sources) == expected


# --- numbers are grounded as numbers (issue 21, item 5) -------------------------------------------


def ground_in(text, value):
    tools = normalize_tools([{"name": "t", "parameters": {"type": "object", "properties": {"v": {}}}}])
    history = normalize_history([{"role": "user", "content": text}])
    (item,) = ground_call(normalize_call({"name": "t", "arguments": {"v": value}}), history, tools.get("t"))
    return item


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("Please refund 49.90", 49.9),
        ("The total is $1,250.00.", 1250),
        ("The total is $1,250.00.", 1250.0),
        ("Set it to 21.50 degrees", 21.5),
        ("Book 3 nights", 3.0),
        ("Move it by -5 units", -5),
        ("Move it by \u22125 units", -5),
        ("Order 12,345,678 units", 12345678),
        ("Keep 0.50 of it", 0.5),
        ("Stay 3-5 days", 5),
        ('{"ids": [1,2]}', 2),
        ("Ship 5,000 units", 5000),
        ("tiny: 1e-05", 1e-05),
        ("huge: 1e+22", 1e22),
        ("sys -3.25e-10", -3.25e-10),
        ("sys -0.0", -0.0),
    ],
)
def test_a_number_is_grounded_where_the_conversation_writes_the_same_number(text, value):
    item = ground_in(text, value)
    assert item.grounded and item.sources[0].kind == "user"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("Please refund 49.95", 49.9),
        ("Since 2025", 5),
        ("The total is $1,250.00", 125),
        ("The total is $1,250.00", 250),
        ("Move it by -5 units", 5),
        ("Version 1.2.3", 1.2),
        ("Version 1.2.3", 2.3),
        ("Zip 02134", 2134),
        ("Pick 5.5", 5),
    ],
)
def test_a_different_number_is_not_a_source(text, value):
    assert not ground_in(text, value).grounded


def test_a_string_value_stays_text():
    assert not ground_in("Zip 02134", "2134").grounded
    assert ground_in("Zip 02134", "02134").grounded
    assert not ground_in("Please refund 49.90", "49.9").grounded


_NUMBER_TOKENS = (
    re.compile(r"(?<![\w.])(\d+)(\.\d+)?(?!\w|\.\d)"),  # "1,250" holds 1 and 250 ...
    re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+)(\.\d+)?(?!\w|\.\d)"),
)  # ... and 1250


def _reference_number(text, value):
    """The first whole number token of `text` equal to `value` (same sign; either sign for
    zero), read both ways where commas join digits, as a quote."""
    target = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    found = []
    for tokens in _NUMBER_TOKENS:
        for match in tokens.finditer(text):
            whole, fraction = match.group(1), match.group(2) or ""
            if len(whole) > 1 and whole[0] == "0":
                continue  # "02134" is an identifier, not the number 2134
            start = match.start()
            if len(whole) == 3 and fraction and start >= 2 and text[start - 1] == "," and text[start - 2].isdigit():
                continue  # a thousands group: "1,250.00" holds 1250, not 250
            negative = (
                start > 0 and text[start - 1] in "-\u2212" and (start == 1 or not re.match(r"[\w.]", text[start - 2]))
            )
            if (not target.is_zero() and negative != (target < 0)) or Decimal(whole.replace(",", "") + fraction) != abs(
                target
            ):
                continue
            found.append((start - 1 if negative else start, match.end()))
    if not found:
        return None
    begin, end = min(found)
    lo, hi = max(0, begin - 40), min(len(text), end + 40)
    return ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")


NUMBERS = st.integers(-30, 1300) | st.sampled_from([0.5, 1.5, -2.25, 12.0, 1250.0, 49.9, 0.05, -0.0])


@settings(max_examples=500, deadline=None)
@given(texts=st.lists(st.text(alphabet="0125,.-\u2212 ax_", max_size=60), max_size=4), value=NUMBERS)
def test_a_number_is_found_exactly_where_a_whole_number_token_with_its_sign_equals_it(texts, value):
    history = normalize_history([{"role": "user", "content": t} for t in texts])
    expected = []
    for index, message in enumerate(history.messages):
        quote = _reference_number(" ".join(message.content.split()).lower(), value)
        if quote is not None:
            expected.append(ValueSource(kind="user", index=index, message_index=index, quote=quote).model_dump())
    conversation = _Conversation(history)
    assert conversation.number_sources(value) == expected
    assert _from_marked(conversation, value) == expected  # the path taken after many near misses


def _message(conversation, span):
    return bisect_right(conversation.starts, span["start"]) - 1


def _from_marked(conversation, value):
    """`number_sources` found in the marked copy of the conversation only."""
    found = {}
    for form in _number_forms(value):
        for span in conversation._marked_sources(None, form.marked(), spans=True):
            number = _message(conversation, span)
            if number not in found or span["start"] < found[number][0]:
                found[number] = (span["start"], span["end"])
    out = []
    for number in sorted(found):
        conversation._add(out, *found[number])
    return out


@settings(max_examples=500, deadline=None)
@given(
    texts=st.lists(st.text(alphabet="ab5_.- é2x\n\x00\x01\x03", max_size=120), max_size=5),
    needle=st.text(alphabet="ab5_.- é2x\x00\x01\x03", min_size=1, max_size=4),
)
def test_the_marked_conversation_finds_what_a_search_per_message_finds(texts, needle):
    needle = " ".join(needle.split()).lower()
    assume(needle and needle[0].isalnum() and needle[-1].isalnum())
    history = normalize_history([{"role": "user", "content": t} for t in texts])
    conversation = _Conversation(history)
    expected = [
        ValueSource(kind="user", index=i, message_index=i, quote=q).model_dump()
        for i, q in (
            (i, _reference_find(" ".join(m.content.split()).lower(), needle)) for i, m in enumerate(history.messages)
        )
        if q is not None
    ]
    assert conversation.sources(needle) == expected
    if not {"\x00", "\x01", "\x03"} & set(needle):  # the marked search is used for these only
        assert conversation._marked_sources(_mark(needle), None) == expected


def test_a_value_holding_a_mark_character_is_not_found_where_another_one_stands():
    # Many near misses send a search to the marked conversation, where \x00, \x01 and \x03 are one
    # character: "2\x002" would be found in "2\x032". Such a needle is looked for as it is.
    text = "a2\x002 " * 20 + "then 2\x032 and 2\x012."
    conversation = _Conversation(normalize_history([{"role": "user", "content": text}]))
    assert conversation.sources("2\x002") == []
    [found] = conversation.sources("2\x032")  # the one that is there is still found
    assert "then 2\x032 and" in found["quote"]


# --- worst cases stay near-linear (issue 21, item 6) ----------------------------------------------


class _Counting:
    def __init__(self, pattern):
        self.pattern, self.calls = pattern, 0

    def search(self, *args):
        self.calls += 1
        return self.pattern.search(*args)


def test_values_that_stop_inside_one_long_token_cost_their_candidates_not_the_text(monkeypatch):
    token = "a" * 200_000  # every position holds every value: each occurrence is a near miss
    values = ["a" * n for n in (1, 2, 3, 10, 100, 1_000, 10_000, 100_000, 199_999)] + [token]
    checked = []
    real_whole_token, real_mark = grounding._whole_token, grounding._mark
    monkeypatch.setattr(grounding, "_whole_token", lambda *a: checked.append(a[1]) or real_whole_token(*a))
    marked = []
    monkeypatch.setattr(grounding, "_mark", lambda text: marked.append(len(text)) or real_mark(text))
    scans = _Counting(grounding._NON_WORD)
    monkeypatch.setattr(grounding, "_NON_WORD", scans)
    tools = normalize_tools([{"name": "t", "parameters": {"type": "object"}}])
    arguments = {f"v{i}": v for i, v in enumerate(values)}
    history = normalize_history(
        [{"role": "user", "content": "use it"}, {"role": "tool", "tool_call_id": "1", "content": token}]
    )
    result = ground_call(normalize_call({"name": "t", "arguments": arguments}), history, tools.get("t"))
    assert [item.grounded for item in result] == [False] * (len(values) - 1) + [True]
    assert len(checked) <= 2 * len(values)  # one near miss per value, then the token is skipped whole
    assert scans.calls == 1  # the long token's end is found once for all values
    assert marked == []  # no marked copy needed


@pytest.mark.patches_module("reflection.grounding")
def test_many_near_misses_move_to_the_marked_copy_built_once_per_row(monkeypatch):
    text = " ".join(f"x{i % 10}y" for i in range(50_000))  # every digit occurs only inside tokens
    marked = []
    real_mark = grounding._mark
    monkeypatch.setattr(grounding, "_mark", lambda t: marked.append(len(t)) or real_mark(t))
    checked = []
    real_whole_token = grounding._whole_token
    monkeypatch.setattr(grounding, "_whole_token", lambda *a: checked.append(a[1]) or real_whole_token(*a))
    values = [str(i) for i in range(10)] + list(range(10))
    tools = normalize_tools([{"name": "t", "parameters": {"type": "object"}}])
    history = normalize_history([{"role": "tool", "tool_call_id": "1", "content": text}])
    result = ground_call(
        normalize_call({"name": "t", "arguments": {f"v{i}": v for i, v in enumerate(values)}}), history, tools.get("t")
    )
    assert not any(item.grounded for item in result)
    assert [n for n in marked if n == len(text)] == [len(text)]  # the conversation is marked once
    assert len(checked) <= len(values) * (grounding._FIND_MISSES + 1)
