"""The gate in an agent loop, in the library: a model that repeats its refused call after reading the
gate's feedback is refused again, however the feedback comes back; checks that need a conversation
are not assessed without one; renames and narrowed calls are suggestions."""

from __future__ import annotations

import pytest

from reflection import Gate, GatePolicy, ReflectionConfig
from reflection.pipeline import NEEDS_CONVERSATION

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "delete_file",
            "parameters": {"type": "object", "required": ["path"], "properties": {"path": {"type": "string"}}},
        },
    },
]
QUESTION = {"role": "user", "content": "What's the weather in Paris?"}
TOKYO = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Tokyo"}'}}


def _gate(fake_judge, **policy) -> Gate:
    return Gate(ReflectionConfig(judge=fake_judge.config), policy=GatePolicy(**{"judge_when": "ungrounded", **policy}))


def _ways_back(feedback: str) -> dict[str, list[dict]]:
    """The conversations a hook or a user builds after a refusal."""
    turn = {"role": "assistant", "content": None, "tool_calls": [TOKYO]}
    return {
        "tool result": [QUESTION, turn, {"role": "tool", "tool_call_id": "call_1", "content": feedback}],
        "user message": [QUESTION, turn, {"role": "user", "content": feedback}],
        "wrapped": [QUESTION, turn, {"role": "tool", "tool_call_id": "call_1", "content": "Error: " + feedback}],
        "header dropped": [
            QUESTION,
            turn,
            {"role": "tool", "tool_call_id": "call_1", "content": "\n".join(feedback.splitlines()[1:])},
        ],
        "anthropic": [
            QUESTION,
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Tokyo"}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": feedback}]},
        ],
    }


@pytest.mark.parametrize("way", ["tool result", "user message", "wrapped", "header dropped", "anthropic"])
async def test_the_gates_own_feedback_never_grounds_the_value_it_refused(fake_judge, way):
    fake_judge.script(
        "general_hallucination_check", score=1, explanation="Tokyo appears nowhere; the user asked about Paris."
    )
    async with _gate(fake_judge) as gate:
        first = await gate.check(TOKYO, TOOLS, [QUESTION])
        assert first.action == "reflect" and '"Tokyo"' in first.feedback
        asked = len(fake_judge.requests)
        again = await gate.check(TOKYO, TOOLS, _ways_back(first.feedback)[way])
    assert again.action == "reflect", again.reason
    assert len(fake_judge.requests) > asked  # the cascade did not skip the judge
    grounding = again.result.grounding[0]
    assert grounding.value == "Tokyo" and not grounding.grounded
    # The judge saw the refusal only labelled as such, never its words.
    conversation = fake_judge.requests[-1].data["conversation"]
    assert all("not found in the conversation" not in str(m.get("content")) for m in conversation)
    assert any("reflection refused an earlier tool call" in str(m.get("content")) for m in conversation)


async def test_feedback_written_by_another_process_is_recognised_by_its_shape(fake_judge):
    # The gateway's workers are separate processes: recognition cannot rest on memory alone.
    feedback = (
        'The call to "get_weather" was not run. Fix these problems and propose the call again:\n'
        "- general_hallucination_check (score 1/5): Tokyo appears nowhere.\n"
        '  parameters: $.city (value "Tokyo" not found in the conversation)'
    )
    async with _gate(fake_judge) as gate:
        decision = await gate.check(TOKYO, TOOLS, [QUESTION, {"role": "user", "content": feedback}])
    assert decision.result.judge_skipped is None and not decision.result.grounding[0].grounded


async def test_a_value_only_in_the_agents_own_earlier_text_does_not_skip_the_judge(fake_judge):
    history = [QUESTION, {"role": "assistant", "content": "I will look up Tokyo."}]
    async with _gate(fake_judge) as gate:
        decision = await gate.check(TOKYO, TOOLS, history)
    assert decision.result.judge_skipped is None and len(fake_judge.requests) == 1
    assert [s.kind for s in decision.result.grounding[0].sources] == ["assistant"]


async def test_without_a_conversation_the_checks_that_need_one_are_not_assessed(fake_judge):
    fake_judge.script("general_hallucination_check", score=1, explanation="nothing supports this")
    async with _gate(fake_judge) as gate:
        decision = await gate.check({"name": "get_weather", "arguments": {"city": "Paris"}}, TOOLS, None)
    assert decision.action == "allow", decision.reason
    semantic = decision.result.semantic
    for name in NEEDS_CONVERSATION:
        assert semantic[name].status == "skipped" and semantic[name].explanation.startswith("not assessable")
    assert semantic["general_value_format_alignment"].status == "passed"
    assert fake_judge.requests[0].checks == ["general_value_format_alignment"]
    assert decision.result.overall_valid is True


async def test_not_assessed_checks_are_named_in_the_feedback(fake_judge):
    fake_judge.script("general_value_format_alignment", score=1, explanation="the city is lower case")
    async with _gate(fake_judge) as gate:
        decision = await gate.check({"name": "get_weather", "arguments": {"city": "paris"}}, TOOLS, [])
    assert decision.action == "reflect"
    assert "- general_hallucination_check not assessed: not assessable: no conversation" in decision.feedback


@pytest.mark.parametrize("name", ["Delete_file", "DELETE_FILE", "delete-file", "dеlete_file"])
async def test_a_misspelt_high_risk_tool_never_runs_as_the_real_one(fake_judge, name):
    fake_judge.fail(500, times=100)
    policy = {"tools": [{"match": "delete_*", "risk": "high"}], "deadline_ms": 2000}
    async with _gate(fake_judge, **policy) as gate:
        decision = await gate.check({"name": name, "arguments": {"path": "/"}}, TOOLS, [QUESTION])
    assert decision.action == "reflect" and decision.call == {"name": name, "arguments": {"path": "/"}}
    assert "renames the tool" in decision.reason


async def test_an_allowed_rename_takes_the_rules_and_risk_of_the_tool_that_runs(fake_judge):
    fake_judge.fail(500, times=100)
    policy = {"tools": [{"match": "delete_*", "risk": "high"}], "apply_renames": True}
    async with _gate(fake_judge, **policy) as gate:
        decision = await gate.check({"name": "Delete_file", "arguments": {"path": "/"}}, TOOLS, [QUESTION])
    assert decision.action == "deny" and "fail-closed for high-risk tool" in decision.reason


async def test_a_correction_that_drops_arguments_is_only_suggested(fake_judge):
    tools = [
        {
            "name": "purge",
            "parameters": {
                "type": "object",
                "properties": {"filter": {"type": "string"}},
                "additionalProperties": False,
            },
        }
    ]
    call = {"name": "purge", "arguments": {"filter": "tmp-*", "dry_run": True}}
    async with _gate(fake_judge) as gate:
        decision = await gate.check(call, tools, [QUESTION])
    assert decision.action == "reflect" and decision.call == call
    assert (
        "removes arguments" in decision.reason
        and 'Suggested call (passes the static checks): "purge"' in decision.feedback
    )


@pytest.mark.slow
async def test_ten_thousand_parallel_calls_are_decided_one_by_one(fake_judge):
    calls = [{"name": "get_weather", "arguments": {"city": "Paris"}} for _ in range(10_000)]
    async with Gate() as gate:
        decisions = await gate.check(calls, TOOLS, [QUESTION])
    assert len(decisions) == 10_000 and {d.action for d in decisions} == {"allow"}


async def test_the_judge_sees_a_bounded_neighbourhood_of_a_large_turn(fake_judge):
    calls = [{"name": "get_weather", "arguments": {"city": f"Paris {i}"}} for i in range(40)]
    async with _gate(fake_judge, judge_when="always") as gate:
        decisions = await gate.check(calls, TOOLS, [QUESTION])
    assert len(decisions) == 40 and len(fake_judge.requests) == 40
    shown = [len(r.data["other_calls_in_same_turn"]) for r in fake_judge.requests]
    assert set(shown) == {16}
