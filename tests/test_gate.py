"""`Gate`: decisions with the default policy, the caller's call format kept, and the config."""

import pytest
from pydantic import ValidationError

from reflection import Gate, GatePolicy, ReflectionConfig, ToolCall

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "book_flight",
            "description": "Book a flight.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "passengers": {"type": "integer"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
]
HISTORY = [{"role": "user", "content": "Book a flight to Paris for 2 passengers."}]
OPENAI_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "book_flight", "arguments": '{"city": "Paris", "passengers": 2}'},
}
FIXABLE_OPENAI_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "book_flight", "arguments": '{"city": "Paris", "passengers": "2"}'},
}


def gate(fake_judge, **policy):
    return Gate(ReflectionConfig(judge=fake_judge.config), policy=GatePolicy(**policy))


async def test_a_valid_call_is_allowed_unchanged(fake_judge):
    async with gate(fake_judge) as g:
        decision = await g.check(OPENAI_CALL, TOOLS, HISTORY)
    assert decision.action == "allow" and decision.reason == "valid"
    assert decision.call is OPENAI_CALL and decision.feedback is None
    assert decision.result.overall_valid is True and decision.tool == "book_flight"
    assert len(fake_judge.requests) == 1 and decision.latency_ms > 0


async def test_a_fixable_openai_call_is_modified_and_stays_an_openai_call(fake_judge):
    async with gate(fake_judge) as g:
        decision = await g.check(FIXABLE_OPENAI_CALL, TOOLS, HISTORY)
    assert decision.action == "modify" and decision.reason == "static correction applied"
    assert decision.call == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "book_flight", "arguments": '{"city":"Paris","passengers":2}'},
    }
    assert decision.feedback is None
    # The judge still looked at the call: a correction fixes types, not invented values.
    assert len(fake_judge.requests) == 1


async def test_a_fixable_anthropic_tool_use_is_modified_in_anthropic_shape(fake_judge):
    call = {"type": "tool_use", "id": "toolu_1", "name": "book_flight", "input": {"city": "Paris", "passengers": "2"}}
    async with gate(fake_judge) as g:
        decision = await g.check(call, TOOLS, HISTORY)
    assert decision.action == "modify"
    assert decision.call == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "book_flight",
        "input": {"city": "Paris", "passengers": 2},
    }


async def test_a_fixable_plain_call_keeps_its_argument_key_and_a_toolcall_stays_a_toolcall(fake_judge):
    async with gate(fake_judge) as g:
        plain = await g.check({"name": "book_flight", "args": {"city": "Paris", "passengers": "2"}}, TOOLS, HISTORY)
        internal = await g.check(
            ToolCall(name="book_flight", arguments={"city": "Paris", "passengers": "2"}), TOOLS, HISTORY
        )
    assert plain.call == {"name": "book_flight", "args": {"city": "Paris", "passengers": 2}}
    assert internal.call == ToolCall(name="book_flight", arguments={"city": "Paris", "passengers": 2})


async def test_corrections_are_not_applied_when_the_policy_says_so(fake_judge):
    async with gate(fake_judge, apply_corrections=False) as g:
        decision = await g.check(FIXABLE_OPENAI_CALL, TOOLS, HISTORY)
    assert decision.action == "reflect" and decision.call is FIXABLE_OPENAI_CALL
    assert decision.reason == "static checks failed: incorrect_parameter_type"
    assert 'Suggested call (passes the static checks): "book_flight"' in decision.feedback
    assert fake_judge.requests == []


async def test_a_call_failing_a_judge_check_is_sent_back_with_feedback(fake_judge):
    fake_judge.script(
        "general_hallucination_check",
        score=1,
        explanation="The user never named Rome.",
        evidence=["Book a flight to Paris"],
    )
    call = {"name": "book_flight", "arguments": {"city": "Rome", "passengers": 2}}
    async with gate(fake_judge) as g:
        decision = await g.check(call, TOOLS, HISTORY)
    assert decision.action == "reflect" and decision.reason == "judge checks failed: general_hallucination_check"
    assert decision.call is call
    assert decision.feedback == decision.result.feedback()
    assert "general_hallucination_check (score 1/5): The user never named Rome." in decision.feedback
    assert 'parameters: $.city (value "Rome" not found in the conversation)' in decision.feedback


@pytest.mark.parametrize("on_invalid", ["deny", "escalate"])
async def test_an_invalid_call_gets_the_configured_action(fake_judge, on_invalid):
    async with gate(fake_judge, on_invalid=on_invalid) as g:
        decision = await g.check({"name": "book_flight", "arguments": {"town": "Paris"}}, TOOLS, HISTORY)
    assert decision.action == on_invalid and decision.feedback is not None


async def test_an_assistant_message_gives_one_decision_per_call_in_its_own_shape(fake_judge):
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            OPENAI_CALL,
            {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": 7}}},
        ],
    }
    async with gate(fake_judge) as g:
        decisions = await g.check(message, TOOLS, HISTORY)
    assert [d.action for d in decisions] == ["allow", "modify"]
    assert decisions[0].call is OPENAI_CALL
    assert decisions[1].call["function"]["arguments"] == {"city": "7"}  # an object came in: an object goes out


async def test_without_a_judge_the_decision_rests_on_the_static_checks():
    async with Gate() as g:
        decision = await g.check(OPENAI_CALL, TOOLS, HISTORY)
    assert decision.action == "allow"
    assert decision.result.judge_skipped.startswith("no judge configured")


def test_check_sync_works_inside_and_outside_a_running_loop(fake_judge):
    import asyncio

    with gate(fake_judge) as g:
        assert g.check_sync(OPENAI_CALL, TOOLS, HISTORY).action == "allow"

        async def inside():
            return g.check_sync(FIXABLE_OPENAI_CALL, TOOLS, HISTORY)

        assert asyncio.run(inside()).action == "modify"


async def test_the_decision_serialises_to_json(fake_judge):
    async with gate(fake_judge) as g:
        decision = await g.check(FIXABLE_OPENAI_CALL, TOOLS, HISTORY)
    data = decision.model_dump(mode="json")
    assert data["action"] == "modify" and data["tool"] == "book_flight" and data["shadow_action"] is None
    assert data["result"]["overall_valid"] is False and data["call"]["id"] == "call_1"


def test_the_gate_reads_its_policy_from_the_config_file(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        "gate:\n  on_invalid: escalate\n  judge_when: ungrounded\n  deadline_ms: 1500\n"
        "  on_judge_failure: {low: deny}\n"
        "  tools:\n    - {match: 'search_*', checks: skip}\n    - {match: 'delete_*', risk: high}\n"
    )
    config = ReflectionConfig.from_file(path)
    policy = Gate(config).policy
    assert policy is config.gate and policy.on_invalid == "escalate" and policy.deadline_ms == 1500
    assert policy.on_judge_failure == {"low": "deny", "high": "deny"}
    assert policy.rule_for("search_web").checks == "skip" and policy.rule_for("delete_user").risk == "high"
    assert policy.rule_for("get_weather") is None


def test_an_unknown_policy_key_is_a_clear_error():
    with pytest.raises(ValidationError, match="on_invaild"):
        ReflectionConfig(gate={"on_invaild": "deny"})


async def test_a_misspelt_tool_is_only_suggested_by_default(fake_judge):
    text = '{"id": "call_9", "type": "function", "function": {"name": "book_fligt", "arguments": "{\\"city\\": \\"Paris\\"}"}}'
    async with gate(fake_judge) as g:
        decision = await g.check(text, TOOLS, HISTORY)
    assert decision.action == "reflect" and decision.call == text
    assert decision.reason.endswith("the correction renames the tool, so it is only suggested")
    assert 'Suggested call (passes the static checks): "book_flight" {"city":"Paris"}' in decision.feedback


async def test_json_text_in_gives_json_text_out_and_a_misspelt_tool_is_renamed_when_the_policy_allows(fake_judge):
    text = '{"id": "call_9", "type": "function", "function": {"name": "book_fligt", "arguments": "{\\"city\\": \\"Paris\\"}"}}'
    async with gate(fake_judge, apply_renames=True) as g:
        decision = await g.check(text, TOOLS, HISTORY)
    assert decision.action == "modify" and decision.tool == "book_fligt"
    assert decision.call == (
        '{"id":"call_9","type":"function","function":{"name":"book_flight","arguments":"{\\"city\\":\\"Paris\\"}"}}'
    )


async def test_an_anthropic_assistant_message_gives_anthropic_blocks_back(fake_judge):
    message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Booking now."},
            {"type": "tool_use", "id": "toolu_1", "name": "book_flight", "input": {"city": "Paris", "passengers": "2"}},
        ],
    }
    async with gate(fake_judge) as g:
        decisions = await g.check(message, TOOLS, HISTORY)
    assert [d.action for d in decisions] == ["modify"]
    assert decisions[0].call == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "book_flight",
        "input": {"city": "Paris", "passengers": 2},
    }


async def test_reflect_also_gives_one_result_per_tool_use_block_of_an_anthropic_message():
    from reflection import reflect

    message = {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {"town": "Rome"}},
        ],
    }
    results = await reflect(message, TOOLS, HISTORY)
    assert [r.overall_valid for r in results] == [True, False]


async def test_the_memory_judge_cache_evicts_the_least_recently_used_and_counts_hits():
    from reflection._lru import DEFAULT_SIZE
    from reflection.gate import MemoryJudgeCache
    from reflection.static import set_cache_size

    cache = MemoryJudgeCache(max_entries=2)
    await cache.put("a", {"score": 1})
    await cache.put("b", {"score": 2})
    assert await cache.get("a") == {"score": 1}  # "a" is now the most recently used
    await cache.put("c", {"score": 3})  # evicts "b"
    assert (await cache.get("b"), await cache.get("c"), len(cache)) == (None, {"score": 3}, 2)
    assert (cache.hits, cache.misses) == (2, 1)
    try:
        set_cache_size(1)  # the static stage's caches only: the gate's keeps its own bound
        assert len(cache) == 2 and await cache.get("a") == {"score": 1}
    finally:
        set_cache_size(DEFAULT_SIZE)
