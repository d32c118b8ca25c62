"""The OpenAI Agents SDK guardrail, run by the real SDK with its scripted model (no network)."""

import json

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.exceptions import ToolInputGuardrailTripwireTriggered
from agents.testing import ScriptedModel, assistant_message, function_call

from reflection._own_words import FEEDBACK_HEADERS
from reflection import Gate, GatePolicy, ReflectionConfig
from reflection.integrations import approval_text
from reflection.integrations.openai_agents import guard_tools, reflection_guardrail
from reflection.testing import FakeJudge
from refund_agent import FAIL_HALLUCINATION, INSTRUCTIONS, QUESTION, refund_tools

set_tracing_disabled(True)  # the SDK would otherwise try to export traces over the network

HEADERS = {action: header.split(".")[0] for action, header in FEEDBACK_HEADERS.items()}


def build(gate: Gate, steps: list) -> tuple[Agent, ScriptedModel, list[dict]]:
    refunds: list[dict] = []

    model = ScriptedModel(steps)
    agent = Agent(
        name="support",
        instructions=INSTRUCTIONS,
        model=model,
        tools=guard_tools([function_tool(fn) for fn in refund_tools(refunds)], gate),
    )
    return agent, model, refunds


def tool_outputs(model: ScriptedModel, call_index: int) -> dict[str, str]:
    """call id -> the tool result the model was shown in its `call_index`-th request."""
    items = model.calls[call_index].input
    return {
        item["call_id"]: item["output"]
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


@pytest.mark.parametrize("on_invalid", ["reflect", "deny"])
async def test_an_invalid_call_is_not_run_and_its_feedback_is_the_tool_result(on_invalid):
    with FakeJudge() as fake:
        fake.reply_json(FAIL_HALLUCINATION)  # the first judge request; later ones pass
        async with Gate(ReflectionConfig(judge=fake.config), policy=GatePolicy(on_invalid=on_invalid)) as gate:
            agent, model, refunds = build(
                gate,
                [
                    [function_call("refund_order", {"order_id": "ORD-999", "amount": 49.9}, call_id="c1")],
                    [function_call("refund_order", {"order_id": "ORD-1042", "amount": 49.9}, call_id="c2")],
                    [assistant_message("Refunded 49.90 on ORD-1042.")],
                ],
            )
            result = await Runner.run(agent, QUESTION)
    assert refunds == [{"order_id": "ORD-1042", "amount": 49.9}]  # only the second call ran
    feedback = tool_outputs(model, 1)["c1"]
    assert feedback.startswith('The call to "refund_order" ' + HEADERS[on_invalid])
    assert "general_hallucination_check (score 1/5): order ORD-999 appears nowhere" in feedback
    assert tool_outputs(model, 2)["c2"] == "refunded 49.9 on ORD-1042"
    decisions = [r.output.output_info for r in result.tool_input_guardrail_results]
    assert [d.action for d in decisions] == [on_invalid, "allow"]
    assert result.final_output == "Refunded 49.90 on ORD-1042."
    # The judge saw the agent's instructions, the user's turn and both tools.
    seen = fake.requests[0].data
    assert seen["tool_call"] == {"name": "refund_order", "arguments": {"order_id": "ORD-999", "amount": 49.9}}
    assert INSTRUCTIONS in json.dumps(seen) and QUESTION in json.dumps(seen) and "get_order" in fake.requests[0].prompt


async def test_a_follow_up_run_is_judged_with_the_earlier_calls_and_their_results():
    with FakeJudge() as fake:
        async with Gate(ReflectionConfig(judge=fake.config)) as gate:
            agent, model, refunds = build(
                gate,
                [
                    [function_call("refund_order", {"order_id": "ORD-1042", "amount": 49.9}, call_id="c1")],
                    [assistant_message("Refunded.")],
                    [function_call("refund_order", {"order_id": "ORD-1042", "amount": 49.9}, call_id="c2")],
                    [assistant_message("Refunded again.")],
                ],
            )
            first = await Runner.run(agent, QUESTION)
            await Runner.run(agent, [*first.to_input_list(), {"role": "user", "content": "Did it go through?"}])
    conversation = fake.requests[1].data["conversation"]
    assert [m["role"] for m in conversation] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert conversation[2]["tool_calls"][0]["arguments"] == {"order_id": "ORD-1042", "amount": 49.9}
    assert conversation[3]["content"] == "refunded 49.9 on ORD-1042"
    assert len(refunds) == 2  # the fake judge passes everything; what matters is what it was shown


async def test_a_correctable_call_sends_the_verified_correction_back_since_guardrails_cannot_rewrite():
    async with Gate(ReflectionConfig()) as gate:  # no judge: static checks decide
        agent, model, refunds = build(
            gate,
            [
                [function_call("refund_order", '{"order_id": "ORD-1042", "amount": "49.9"}', call_id="c1")],
                [function_call("refund_order", {"order_id": "ORD-1042", "amount": 49.9}, call_id="c2")],
                [assistant_message("done")],
            ],
        )
        result = await Runner.run(agent, QUESTION)
    assert refunds == [{"order_id": "ORD-1042", "amount": 49.9}]
    feedback = tool_outputs(model, 1)["c1"]
    assert feedback.endswith(
        'Suggested call (passes the static checks): "refund_order" {"order_id":"ORD-1042","amount":49.9}'
    )
    assert [r.output.output_info.action for r in result.tool_input_guardrail_results] == ["modify", "allow"]


async def test_escalate_trips_the_guardrail_and_carries_the_decision():
    with FakeJudge() as fake:
        fake.reply_json(FAIL_HALLUCINATION)
        async with Gate(ReflectionConfig(judge=fake.config), policy=GatePolicy(on_invalid="escalate")) as gate:
            agent, _, refunds = build(
                gate,
                [
                    [function_call("refund_order", {"order_id": "ORD-999", "amount": 49.9}, call_id="c1")],
                ],
            )
            with pytest.raises(ToolInputGuardrailTripwireTriggered) as raised:
                await Runner.run(agent, QUESTION)
    assert refunds == []
    decision = raised.value.output.output_info
    assert decision.action == "escalate" and decision.tool == "refund_order"
    assert decision.reason == "judge checks failed: general_hallucination_check"
    # For the person who decides, not for the model ("propose the call again" is the model's).
    assert approval_text(decision) == (
        'The call to "refund_order" is waiting for a person\'s approval: '
        "judge checks failed: general_hallucination_check."
    )


async def test_shadow_mode_runs_everything_and_records_what_it_would_have_done():
    with FakeJudge() as fake:
        fake.reply_json(FAIL_HALLUCINATION)
        async with Gate(ReflectionConfig(judge=fake.config), policy=GatePolicy(shadow=True)) as gate:
            agent, _, refunds = build(
                gate,
                [
                    [function_call("refund_order", {"order_id": "ORD-999", "amount": 49.9}, call_id="c1")],
                    [assistant_message("done")],
                ],
            )
            result = await Runner.run(agent, QUESTION)
    assert refunds == [{"order_id": "ORD-999", "amount": 49.9}]
    decision = result.tool_input_guardrail_results[0].output.output_info
    assert (decision.action, decision.shadow_action) == ("allow", "reflect")


def test_guard_tools_keeps_existing_guardrails_and_leaves_the_originals_alone():
    @function_tool
    def ping() -> str:
        """Ping."""
        return "pong"

    other = reflection_guardrail(Gate(), name="other")
    original = ping
    original.tool_input_guardrails = [other]
    (guarded,) = guard_tools([original], Gate())
    assert [g.get_name() for g in guarded.tool_input_guardrails] == ["other", "reflection_gate"]
    assert [g.get_name() for g in original.tool_input_guardrails] == ["other"]
