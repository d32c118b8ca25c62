"""LangChain middleware and the LangGraph ToolNode wrapper, run by the real packages with a
scripted chat model (no network)."""

import json
from typing import Annotated, Any, Literal

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command

from reflection._own_words import FEEDBACK_HEADERS, REFUSAL_LABEL
from reflection import Gate, GatePolicy, ReflectionConfig
from reflection.integrations import EscalationRequired
from reflection.integrations.langchain import ReflectionMiddleware, reflection_tool_node
from reflection.testing import FakeJudge
from refund_agent import FAIL_HALLUCINATION, QUESTION, refund_tools

HEADERS = {action: header.split(".")[0] for action, header in FEEDBACK_HEADERS.items()}


class ScriptedChatModel(FakeMessagesListChatModel):
    """LangChain's fake list model, able to 'bind' tools, recording what it was sent."""

    seen: list = []

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ScriptedChatModel":
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


def calls(*steps: tuple[str, dict, str] | str) -> list[AIMessage]:
    """AI messages: a (tool, args, call id) step proposes a call, a string answers."""
    return [
        AIMessage(content=s)
        if isinstance(s, str)
        else AIMessage(content="", tool_calls=[{"name": s[0], "args": s[1], "id": s[2], "type": "tool_call"}])
        for s in steps
    ]


def make_tools(refunds: list) -> list:
    return [tool(fn) for fn in refund_tools(refunds)]


def tool_results(state: dict) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}


@pytest.mark.parametrize("on_invalid", ["reflect", "deny"])
async def test_middleware_answers_an_invalid_call_with_the_feedback_and_runs_the_fixed_one(on_invalid):
    refunds: list = []
    tools = make_tools(refunds)
    model = ScriptedChatModel(
        seen=[],
        responses=calls(
            ("refund_order", {"order_id": "ORD-999", "amount": 49.9}, "c1"),
            ("refund_order", {"order_id": "ORD-1042", "amount": 49.9}, "c2"),
            "Refunded 49.90 on ORD-1042.",
        ),
    )
    with FakeJudge() as fake:
        fake.reply_json(FAIL_HALLUCINATION)
        async with Gate(ReflectionConfig(judge=fake.config), policy=GatePolicy(on_invalid=on_invalid)) as gate:
            agent = create_agent(
                model, tools, system_prompt="You handle refunds.", middleware=[ReflectionMiddleware(gate, tools=tools)]
            )
            state = await agent.ainvoke({"messages": [HumanMessage(QUESTION)]})
    assert refunds == [{"order_id": "ORD-1042", "amount": 49.9}]
    results = tool_results(state)
    assert results["c1"].status == "error"
    assert results["c1"].content.startswith('The call to "refund_order" ' + HEADERS[on_invalid])
    assert "order ORD-999 appears nowhere" in results["c1"].content
    assert results["c2"].content == "refunded 49.9 on ORD-1042"
    assert any(isinstance(m, ToolMessage) and m.tool_call_id == "c1" for m in model.seen[1])  # the model saw it
    assert state["messages"][-1].content == "Refunded 49.90 on ORD-1042."
    seen = fake.requests[0].data
    assert seen["tool_call"] == {"name": "refund_order", "arguments": {"order_id": "ORD-999", "amount": 49.9}}
    assert QUESTION in json.dumps(seen) and "get_order" in fake.requests[0].prompt
    assert "ORD-999" not in json.dumps(seen["conversation"])  # the proposing turn is not history
    later = fake.requests[1].data["conversation"]  # the retry is judged knowing what happened
    assert [m["role"] for m in later[-2:]] == ["assistant", "tool"]
    assert later[-2]["tool_calls"][0]["arguments"]["order_id"] == "ORD-999"
    assert later[-1]["content"] == REFUSAL_LABEL  # the judge sees the refusal only labelled as such


def test_sync_middleware_runs_the_verified_correction_where_the_tool_would_reject_the_call_and_says_so():
    readings: list = []

    @tool
    def get_weather(city: str, units: Literal["celsius", "fahrenheit"]) -> str:
        """Weather for a city."""
        readings.append({"city": city, "units": units})
        return "12 degrees"

    model = ScriptedChatModel(
        seen=[], responses=calls(("get_weather", {"city": "Oslo", "units": "Celsius"}, "c1"), "done")
    )
    with Gate(ReflectionConfig()) as gate:  # no judge: the static checks decide
        agent = create_agent(model, [get_weather], middleware=[ReflectionMiddleware(gate, tools=[get_weather])])
        state = agent.invoke({"messages": [HumanMessage("Weather in Oslo, in Celsius?")]})
    # "Celsius" fails the tool's own validation; the gate's verified correction is what ran.
    assert readings == [{"city": "Oslo", "units": "celsius"}]
    assert tool_results(state)["c1"].content == (
        "12 degrees\n\nNote from reflection: the call was corrected before it ran: "
        '$.units: changed "Celsius" to the allowed value "celsius".'
    )
    assert model.seen[1][-1].content == tool_results(state)["c1"].content  # the model read the note too


async def test_the_correction_note_goes_into_the_tool_message_of_a_tool_that_returns_a_command():
    @tool
    def set_units(units: Literal["celsius", "fahrenheit"], tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
        """Set the units for later answers."""
        return Command(update={"messages": [ToolMessage(f"units set to {units}", tool_call_id=tool_call_id)]})

    model = ScriptedChatModel(seen=[], responses=calls(("set_units", {"units": "Celsius"}, "c1"), "done"))
    async with Gate(ReflectionConfig()) as gate:
        agent = create_agent(model, [set_units], middleware=[ReflectionMiddleware(gate, tools=[set_units])])
        state = await agent.ainvoke({"messages": [HumanMessage("Use Celsius from now on.")]})
    assert tool_results(state)["c1"].content == (
        "units set to celsius\n\nNote from reflection: the call was corrected before it ran: "
        '$.units: changed "Celsius" to the allowed value "celsius".'
    )


async def test_middleware_escalate_raises_with_the_decision():
    refunds: list = []
    tools = make_tools(refunds)
    model = ScriptedChatModel(seen=[], responses=calls(("refund_order", {"order_id": "ORD-999", "amount": 49.9}, "c1")))
    with FakeJudge() as fake:
        fake.reply_json(FAIL_HALLUCINATION)
        async with Gate(ReflectionConfig(judge=fake.config), policy=GatePolicy(on_invalid="escalate")) as gate:
            agent = create_agent(model, tools, middleware=[ReflectionMiddleware(gate, tools=tools)])
            with pytest.raises(EscalationRequired) as raised:
                await agent.ainvoke({"messages": [HumanMessage(QUESTION)]})
    assert refunds == []
    assert raised.value.decision.action == "escalate" and raised.value.decision.tool == "refund_order"
    # Written for the person who approves, not for the model.
    assert str(raised.value) == (
        'The call to "refund_order" is waiting for a person\'s approval: '
        "judge checks failed: general_hallucination_check."
    )


def graph_with(node, model) -> Any:
    def call_model(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: MessagesState) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", node)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile()


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_gated_tool_node_in_a_graph_blocks_then_runs(mode):
    refunds: list = []
    tools = make_tools(refunds)
    model = ScriptedChatModel(
        seen=[],
        responses=calls(
            ("refund_order", {"order_id": "ORD-999", "amount": 49.9}, "c1"),
            ("refund_order", {"order_id": "ORD-1042", "amount": 49.9}, "c2"),
            "done",
        ),
    )
    with FakeJudge() as fake:
        fake.reply_json(FAIL_HALLUCINATION)
        async with Gate(ReflectionConfig(judge=fake.config)) as gate:
            app = graph_with(reflection_tool_node(tools, gate), model)
            start = {"messages": [HumanMessage(QUESTION)]}
            state = app.invoke(start) if mode == "sync" else await app.ainvoke(start)
            gate.close() if mode == "sync" else None
    assert refunds == [{"order_id": "ORD-1042", "amount": 49.9}]
    results = tool_results(state)
    assert results["c1"].status == "error" and "order ORD-999 appears nowhere" in results["c1"].content
    assert results["c2"].content == "refunded 49.9 on ORD-1042"
    assert "get_order" in fake.requests[0].prompt  # the node knows every tool


async def test_a_correction_that_renames_the_tool_is_refused_not_run_as_either_tool():
    ran: list = []

    @tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        ran.append(("get_weather", city))
        return "12 degrees"

    @tool
    def get_wether(city: str) -> str:
        """Deprecated spelling, kept for old prompts; the gate is not told about it."""
        ran.append(("get_wether", city))
        return "12 degrees"

    model = ScriptedChatModel(seen=[], responses=calls(("get_wether", {"city": "Paris"}, "c1"), "done"))
    async with Gate(ReflectionConfig()) as gate:
        agent = create_agent(
            model, [get_weather, get_wether], middleware=[ReflectionMiddleware(gate, tools=[get_weather])]
        )
        state = await agent.ainvoke({"messages": [HumanMessage("Weather in Paris?")]})
    assert ran == []  # neither the misspelled tool with the gate's arguments nor the guessed one
    answer = tool_results(state)["c1"]
    assert answer.status == "error" and "get_weather" in answer.content
