"""`formats.express_call` / `raw_calls`: a call leaves in the shape it came in."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reflection._json import dumps
from reflection.formats import express_call, normalize_call, normalize_calls, raw_calls
from reflection.model import ToolCall

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12).filter(str.strip)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
arguments = st.dictionaries(
    st.text(max_size=6),
    st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3)),
    max_size=4,
)


@st.composite
def shaped_calls(draw):
    name, args, as_text = draw(names), draw(arguments), draw(st.booleans())
    payload = dumps(args) if as_text else args
    shape = draw(st.sampled_from(["openai", "anthropic", "plain", "args", "text"]))
    if shape == "openai":
        return {"id": "c1", "type": "function", "function": {"name": name, "arguments": payload}}
    if shape == "anthropic":
        return {"type": "tool_use", "id": "t1", "name": name, "input": args}
    if shape == "args":
        return {"name": name, "args": payload}
    if shape == "text":
        return dumps({"name": name, "arguments": payload})
    return {"name": name, "arguments": payload}


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(shaped_calls(), names, arguments)
def test_a_call_re_expressed_reads_back_as_the_new_call_in_the_old_shape(raw, new_name, new_arguments):
    replacement = ToolCall(name=new_name, arguments=new_arguments)
    out = express_call(raw, replacement)
    again = normalize_call(out) if not isinstance(out, str) else normalize_calls(out)[0]
    assert (again.name, again.arguments, again.id) == (new_name, new_arguments, normalize_calls(raw)[0].id)
    assert type(out) is type(raw)
    if isinstance(raw, dict):
        assert set(out) == set(raw)
        body, new_body = (raw["function"], out["function"]) if "function" in raw else (raw, out)
        key = next(k for k in ("arguments", "args", "input") if k in body)
        assert type(new_body[key]) is type(body[key])  # a JSON string stays a string, an object an object


@settings(max_examples=30, deadline=None)
@given(st.lists(shaped_calls().filter(lambda c: not isinstance(c, str)), min_size=1, max_size=4))
def test_raw_calls_pairs_each_given_call_with_its_normalised_form(calls):
    for message in (calls, {"role": "assistant", "tool_calls": calls}):
        assert [normalize_call(c) for c in raw_calls(message)] == normalize_calls(message)
