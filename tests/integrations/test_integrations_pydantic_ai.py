"""The Pydantic AI capability, run by the real framework with its FunctionModel (no network)."""

import json
from typing import Literal

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from reflection._own_words import FEEDBACK_HEADERS, REFUSAL_LABEL
from reflection import Gate, GatePolicy, ReflectionConfig
from reflection.integrations.pydantic_ai import ReflectionCapability
from reflection.testing import FakeJudge
from refund_agent import FAIL_HALLUCINATION, INSTRUCTIONS, QUESTION, refund_tools


def scripted(*steps: tuple[str, dict, str] | str) -> tuple[FunctionModel, list[list[ModelMessage]]]:
    """A model that answers step by step: a (tool, args, call id) step calls a tool, a string ends."""
    seen: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = steps[len(seen)]
        seen.append(list(messages))
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        return ModelResponse(parts=[ToolCallPart(step[0], step[1], tool_call_id=step[2])])

    return FunctionModel(respond), seen


def build(gate: Gate, model: FunctionModel, **kwargs) -> tuple[Agent, list[dict]]:
    refunds: list[dict] = []
    agent = Agent(model, instructions=INSTRUCTIONS, capabilities=[ReflectionCapability(gate)], **kwargs)

    for fn in refund_tools(refunds):
        agent.tool_plain(fn)
    return agent, refunds


def tool_returns(messages: list[ModelMessage]) -> dict[str, str]:
    return {
        p.tool_call_id: p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }


async def test_an_invalid_call_is_answered_with_the_feedback_and_the_fixed_one_runs():
    model, seen = scripted(
        ("refund_order", {"order_id": "ORD-999", "amount": 49.9}, "c1"),
        ("refund_order", {"order_id": "ORD-1042", "amount": 49.9}, "c2"),
        "Refunded 49.90 on ORD-1042.",
    )
    with FakeJudge() as fake:
        fake.reply_json(FAIL_HALLUCINATION)
        async with Gate(ReflectionConfig(judge=fake.config)) as gate:
            agent, refunds = build(gate, model)
            result = await agent.run(QUESTION)
    assert refunds == [{"order_id": "ORD-1042", "amount": 49.9}]
    returns = tool_returns(seen[1])  # what the model was shown before its second call
    assert returns["c1"].startswith('The call to "refund_order" was not run.')
    assert "order ORD-999 appears nowhere" in returns["c1"]
    assert tool_returns(seen[2])["c2"] == "refunded 49.9 on ORD-1042"
    assert result.output == "Refunded 49.90 on ORD-1042."
    data = fake.requests[0].data
    assert data["tool_call"] == {"name": "refund_order", "arguments": {"order_id": "ORD-999", "amount": 49.9}}
    conversation = json.dumps(data["conversation"])
    assert INSTRUCTIONS in conversation and QUESTION in conversation and "ORD-999" not in conversation
    assert "get_order" in fake.requests[0].prompt
    later = fake.requests[1].data["conversation"]  # the retry is judged knowing what happened
    assert [m["role"] for m in later[-2:]] == ["assistant", "tool"]
    assert later[-2]["tool_calls"][0]["arguments"]["order_id"] == "ORD-999"
    assert later[-1]["content"] == REFUSAL_LABEL  # the judge sees the refusal only labelled as such


async def test_deny_never_spends_a_retry_even_when_repeated():
    model, _ = scripted(
        *[("refund_order", {"order_id": "ORD-999", "amount": 49.9}, f"c{i}") for i in range(4)], "gave up"
    )
    with FakeJudge() as fake:
        fake.script("general_hallucination_check", score=1, explanation="order ORD-999 appears nowhere")
        async with Gate(ReflectionConfig(judge=fake.config), policy=GatePolicy(on_invalid="deny")) as gate:
            agent, refunds = build(gate, model)
            result = await agent.run(QUESTION)
    assert refunds == [] and result.output == "gave up"


async def test_a_correction_the_tool_would_reject_is_validated_and_run_and_recorded_in_the_return_metadata():
    readings: list = []
    model, seen = scripted(("get_weather", {"city": "Oslo", "units": "Celsius"}, "c1"), "12 degrees")
    with Gate(ReflectionConfig()) as gate:  # no judge: the static checks decide
        agent = Agent(model, capabilities=[ReflectionCapability(gate)])

        @agent.tool_plain
        def get_weather(city: str, units: Literal["celsius", "fahrenheit"]) -> str:
            """Weather for a city."""
            readings.append({"city": city, "units": units})
            return "12"

        result = await agent.run("Weather in Oslo, in Celsius?")
    assert readings == [{"city": "Oslo", "units": "celsius"}]
    assert tool_returns(seen[1])["c1"] == "12"  # the model sees the tool's own result
    (part,) = [
        p
        for m in result.all_messages()
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    assert part.metadata["message"] == (
        "Note from reflection: the call was corrected before it ran: "
        '$.units: changed "Celsius" to the allowed value "celsius".'
    )
    assert part.metadata["reflection"]["action"] == "modify"
    assert part.metadata["reflection"]["call"]["arguments"] == {"city": "Oslo", "units": "celsius"}


async def test_a_correction_keeps_the_metadata_of_a_tool_that_returns_its_own():
    model, _ = scripted(("get_weather", {"city": "Oslo", "units": "Celsius"}, "c1"), "done")
    with Gate(ReflectionConfig()) as gate:
        agent = Agent(model, capabilities=[ReflectionCapability(gate)])

        @agent.tool_plain
        def get_weather(city: str, units: Literal["celsius", "fahrenheit"]) -> ToolReturn:
            """Weather for a city."""
            return ToolReturn(return_value="12", metadata={"station": "OSL"})

        result = await agent.run("Weather in Oslo, in Celsius?")
    (part,) = [
        p
        for m in result.all_messages()
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    assert part.content == "12" and part.metadata["station"] == "OSL"
    assert part.metadata["message"].startswith("Note from reflection: the call was corrected")


async def test_escalate_defers_the_call_for_a_person_and_an_approved_call_runs():
    model, _ = scripted(("refund_order", {"order_id": "ORD-999", "amount": 49.9}, "c1"), "Refund done.")
    with FakeJudge() as fake:
        fake.script("general_hallucination_check", score=1, explanation="order ORD-999 appears nowhere")
        async with Gate(ReflectionConfig(judge=fake.config), policy=GatePolicy(on_invalid="escalate")) as gate:
            agent, refunds = build(gate, model, output_type=[str, DeferredToolRequests])
            first = await agent.run(QUESTION)
            assert isinstance(first.output, DeferredToolRequests) and refunds == []
            (pending,) = first.output.approvals
            assert pending.tool_call_id == "c1"
            decision = first.output.metadata["c1"]["reflection"]
            assert decision["action"] == "escalate" and decision["tool"] == "refund_order"
            second = await agent.run(
                message_history=first.all_messages(), deferred_tool_results=first.output.build_results(approve_all=True)
            )
    assert refunds == [{"order_id": "ORD-999", "amount": 49.9}]  # a person approved it
    assert second.output == "Refund done."


def amount_in_words(*ids: str) -> list[tuple[str, dict, str]]:
    """The same refund, with an amount no validator accepts, proposed once per id."""
    return [("refund_order", {"order_id": "ORD-1042", "amount": "forty-nine ninety"}, i) for i in ids]


async def escalated_invalid_call(
    gate: Gate,
    *then: tuple[str, dict, str] | str,
) -> tuple[Agent, list[dict], list, DeferredToolRequests, list]:
    """A run whose model proposes the refund with an amount in words, then follows `then`."""
    model, seen = scripted(*amount_in_words("c1"), *then)
    agent, refunds = build(gate, model, output_type=[str, DeferredToolRequests])
    first = await agent.run(QUESTION)
    assert isinstance(first.output, DeferredToolRequests)
    return agent, refunds, first.all_messages(), first.output, seen


async def test_escalate_defers_a_call_whose_arguments_the_tool_would_reject_instead_of_a_validation_retry():
    async with Gate(ReflectionConfig(), policy=GatePolicy(on_invalid="escalate")) as gate:
        # Before, the model got Pydantic's validation error, and repeating the call ended the
        # run with "exceeded max retries".
        _, refunds, _, requests, seen = await escalated_invalid_call(gate, *amount_in_words("c2", "c3"), "gave up")
    assert refunds == [] and len(seen) == 1  # the run stopped at the first call: no retry, no re-ask
    (pending,) = requests.approvals
    assert (pending.tool_call_id, pending.tool_name) == ("c1", "refund_order")
    assert pending.args_as_dict() == {"order_id": "ORD-1042", "amount": "forty-nine ninety"}
    metadata = requests.metadata["c1"]
    assert metadata["reflection"]["action"] == "escalate"
    assert metadata["reflection"]["reason"] == "static checks failed: incorrect_parameter_type"
    assert metadata["message"] == (
        'The call to "refund_order" is waiting for a person\'s approval: '
        "static checks failed: incorrect_parameter_type."
    )


async def test_a_person_approves_an_escalated_call_with_corrected_arguments_and_it_runs():
    async with Gate(ReflectionConfig(), policy=GatePolicy(on_invalid="escalate")) as gate:
        agent, refunds, history, _, seen = await escalated_invalid_call(gate, "Refund done.")
        second = await agent.run(
            message_history=history,
            deferred_tool_results=DeferredToolResults(
                approvals={"c1": ToolApproved(override_args={"order_id": "ORD-1042", "amount": 49.9})}
            ),
        )
    assert refunds == [{"order_id": "ORD-1042", "amount": 49.9}]
    assert tool_returns(seen[-1])["c1"] == "refunded 49.9 on ORD-1042"
    assert second.output == "Refund done."


async def test_a_person_denies_an_escalated_call_and_the_model_gets_the_denial():
    async with Gate(ReflectionConfig(), policy=GatePolicy(on_invalid="escalate")) as gate:
        agent, refunds, history, _, seen = await escalated_invalid_call(gate, "I could not refund it.")
        await agent.run(
            message_history=history,
            deferred_tool_results=DeferredToolResults(approvals={"c1": ToolDenied("A person refused this refund.")}),
        )
    assert refunds == []
    assert tool_returns(seen[-1])["c1"] == "A person refused this refund."


async def test_arguments_that_are_not_json_are_reported_as_such_not_as_pydantic_ais_stand_in():
    model, seen = scripted(("refund_order", '{"order_id": "ORD-1042", "amount": 49.9', "c1"), "done")
    async with Gate(ReflectionConfig()) as gate:
        agent, refunds = build(gate, model)
        await agent.run(QUESTION)
    feedback = tool_returns(seen[1])["c1"]
    assert refunds == []
    assert "arguments are not valid JSON" in feedback
    assert "INVALID_JSON" not in feedback  # Pydantic AI's stand-in key for text it cannot parse


async def test_an_escalated_call_approved_as_sent_is_still_validated_before_it_runs():
    async with Gate(ReflectionConfig(), policy=GatePolicy(on_invalid="escalate")) as gate:
        agent, refunds, history, requests, seen = await escalated_invalid_call(gate, "I need the amount as a number.")
        await agent.run(message_history=history, deferred_tool_results=requests.build_results(approve_all=True))
    assert refunds == []  # approval does not make "forty-nine ninety" a number
    (retry,) = [p for p in seen[-1][-1].parts if isinstance(p, ToolReturnPart) and p.tool_call_id == "c1"]
    assert retry.outcome == "retried" and "valid number" in retry.model_response_str()
