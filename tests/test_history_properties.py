"""Arbitrary JSON as history never crashes the path to the judge prompt."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reflection.formats import normalize_call, normalize_history, normalize_tools
from reflection.grounding import ground_call
from reflection.semantic import SemanticRequest, build_messages, window_history
from reflection.testing._protocol import request_data

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=25,
)
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system", "bogus"])},
    optional={"content": json_values, "tool_calls": json_values, "tool_call_id": json_values, "name": json_values},
)
TOOLS = normalize_tools([{"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}])


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(history=st.one_of(json_values, st.lists(st.one_of(messages, json_values), max_size=6)), value=json_values)
def test_any_history_and_argument_value_reach_a_well_formed_prompt(history, value):
    h = normalize_history(history)
    call = normalize_call({"name": "f", "arguments": {"a": value}})
    request = SemanticRequest(
        call=call, spec=TOOLS.get("f"), inventory=TOOLS, history=h, grounding=ground_call(call, h, TOOLS.get("f"))
    )
    messages_out, _ = build_messages(request, ("general_hallucination_check",), token_budget=300)
    data = request_data({"messages": messages_out})
    assert data["tool_call"]["arguments"] == {"a": value}
    assert len(window_history(h, 300)) <= len(h.messages) + 1
