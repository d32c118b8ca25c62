"""Every framework hook in an agent loop: a scripted model that repeats a refused call, proposes
parallel calls, misspells a tool's name, and meets a judge error on a re-ask. Each test runs the
real framework (OpenAI Agents SDK, LangChain, Pydantic AI) with its own scripted model and
asserts on what the tool finally received and what the model was shown; the judge is mocked at
the HTTP layer (respx, through `FakeJudge`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from reflection._own_words import FEEDBACK_HEADERS
from reflection import Decision, Gate, GatePolicy, ReflectionConfig, ToolRule
from reflection.testing import FakeJudge

QUESTION = "What's the weather in Paris right now?"
Step = list[tuple[str, dict[str, Any], str]] | str
"""One model turn: the calls it proposes (tool, arguments, call id), or its final answer."""

HEADERS = {action: header.split(".")[0] for action, header in FEEDBACK_HEADERS.items()}


@dataclass
class Outcome:
    """What a run left behind."""

    received: list[dict[str, Any]] = field(default_factory=list)
    """Every call the tool ran, in order: its name and arguments."""
    shown: dict[str, str] = field(default_factory=dict)
    """Call id -> the tool result the model was shown for it."""
    final: str | None = None
    error: Exception | None = None
    """The exception the framework ended the run with, if any."""


def weather_tools(received: list[dict[str, Any]]) -> list[Callable[..., str]]:
    def get_weather(city: str, units: Literal["celsius", "fahrenheit"] = "celsius") -> str:
        """Current weather for a city.

        Args:
            city: The city's name.
            units: Temperature units.
        """
        received.append({"tool": "get_weather", "city": city, "units": units})
        return f"12 degrees {units} in {city}"

    def delete_forecast(city: str) -> str:
        """Delete the stored forecast for a city.

        Args:
            city: The city's name.
        """
        received.append({"tool": "delete_forecast", "city": city})
        return f"deleted the forecast for {city}"

    return [get_weather, delete_forecast]


# --- one driver per framework: run the script, report the outcome ------------------------------


async def run_openai_agents(gate: Gate, steps: list[Step]) -> Outcome:
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.exceptions import AgentsException
    from agents.testing import ScriptedModel, assistant_message, function_call

    from reflection.integrations.openai_agents import guard_tools

    set_tracing_disabled(True)
    outcome = Outcome()
    model = ScriptedModel(
        [
            [assistant_message(s)]
            if isinstance(s, str)
            else [function_call(name, args, call_id=i) for name, args, i in s]
            for s in steps
        ]
    )
    tools = guard_tools([function_tool(fn) for fn in weather_tools(outcome.received)], gate)
    agent = Agent(name="weather", instructions="You answer weather questions.", model=model, tools=tools)
    try:
        outcome.final = str((await Runner.run(agent, QUESTION)).final_output)
    except AgentsException as error:  # the framework's own way of ending a run is part of the outcome
        outcome.error = error
    for call in model.calls:
        for item in call.input if isinstance(call.input, list) else []:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                outcome.shown[item["call_id"]] = str(item["output"])
    return outcome


def scripted_chat_model(steps: list[Step]) -> Any:
    """LangChain's fake list chat model playing `steps`, recording what it was sent in `.seen`."""
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage

    class Scripted(FakeMessagesListChatModel):
        seen: list[Any]

        def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:
            return self

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
            self.seen.append(list(messages))
            return super()._generate(messages, stop, run_manager, **kwargs)

    return Scripted(
        seen=[],
        responses=[
            AIMessage(content=s)
            if isinstance(s, str)
            else AIMessage(
                content="", tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for n, a, i in s]
            )
            for s in steps
        ],
    )


def langchain_outcome(outcome: Outcome, model: Any, state: dict[str, Any]) -> Outcome:
    from langchain_core.messages import ToolMessage

    outcome.final = state["messages"][-1].content
    for messages in model.seen:
        for message in messages:
            if isinstance(message, ToolMessage):
                outcome.shown[message.tool_call_id] = str(message.content)
    return outcome


async def run_langchain(gate: Gate, steps: list[Step]) -> Outcome:
    """`create_agent` with the middleware, run async (`Gate.check`)."""
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool

    from reflection.integrations.langchain import ReflectionMiddleware

    outcome = Outcome()
    model = scripted_chat_model(steps)
    tools = [tool(fn) for fn in weather_tools(outcome.received)]
    agent = create_agent(
        model,
        tools,
        system_prompt="You answer weather questions.",
        middleware=[ReflectionMiddleware(gate, tools=tools)],
    )
    state = await agent.ainvoke({"messages": [HumanMessage(QUESTION)]})
    return langchain_outcome(outcome, model, state)


async def run_langgraph_sync(gate: Gate, steps: list[Step]) -> Outcome:
    """A hand-built LangGraph graph with the gated `ToolNode`, run sync (`Gate.check_sync`, on
    the gate's own thread) from a worker thread, as a sync application would."""
    import anyio
    from langchain_core.messages import HumanMessage, SystemMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph

    from reflection.integrations.langchain import reflection_tool_node

    outcome = Outcome()
    model = scripted_chat_model(steps)
    tools = [tool(fn) for fn in weather_tools(outcome.received)]
    graph = StateGraph(MessagesState)
    graph.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", reflection_tool_node(tools, gate))
    graph.add_edge(START, "model")
    graph.add_conditional_edges(
        "model", lambda state: "tools" if state["messages"][-1].tool_calls else END, ["tools", END]
    )
    graph.add_edge("tools", "model")
    app = graph.compile()
    start = {"messages": [SystemMessage("You answer weather questions."), HumanMessage(QUESTION)]}
    state = await anyio.to_thread.run_sync(app.invoke, start)
    return langchain_outcome(outcome, model, state)


async def run_pydantic_ai(gate: Gate, steps: list[Step]) -> Outcome:
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import AgentRunError
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from reflection.integrations.pydantic_ai import ReflectionCapability

    outcome = Outcome()
    seen: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = steps[len(seen)]
        seen.append(list(messages))
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        return ModelResponse(parts=[ToolCallPart(n, a, tool_call_id=i) for n, a, i in step])

    agent = Agent(
        FunctionModel(respond),
        instructions="You answer weather questions.",
        capabilities=[ReflectionCapability(gate)],
        retries=3,
    )
    for fn in weather_tools(outcome.received):
        agent.tool_plain(fn)
    try:
        outcome.final = str((await agent.run(QUESTION)).output)
    except AgentRunError as error:  # e.g. "exceeded max retries"
        outcome.error = error
    for messages in seen:
        for message in messages:
            for part in message.parts if isinstance(message, ModelRequest) else []:
                if isinstance(part, ToolReturnPart):
                    outcome.shown[part.tool_call_id] = part.model_response_str()
                elif isinstance(part, RetryPromptPart):
                    outcome.shown[part.tool_call_id] = part.model_response()
    return outcome


Driver = Callable[[Gate, list[Step]], Awaitable[Outcome]]
FRAMEWORKS: dict[str, Driver] = {
    "openai_agents": run_openai_agents,
    "langchain": run_langchain,
    "langgraph_sync": run_langgraph_sync,
    "pydantic_ai": run_pydantic_ai,
}


@pytest.fixture(params=list(FRAMEWORKS))
def framework(request: pytest.FixtureRequest) -> str:
    return request.param


def weather(city: str, call_id: str, units: str = "celsius") -> tuple[str, dict[str, Any], str]:
    """A `get_weather` call (units always given: the OpenAI Agents SDK's strict schemas require
    every parameter)."""
    return ("get_weather", {"city": city, "units": units}, call_id)


def hallucination(fake: FakeJudge) -> None:
    """Every later judge request fails the hallucination check (the others pass)."""
    fake.script(
        "general_hallucination_check",
        score=1,
        explanation="the user asked about Paris; Tokyo appears nowhere in the conversation",
    )


class RecordingGate(Gate):
    """A gate that keeps every decision it hands to the hook."""

    decisions: list[Decision]

    async def check(self, call: Any, tools: Any, history: Any = None) -> Decision | list[Decision]:
        decision = await super().check(call, tools, history)
        self.decisions.extend(decision if isinstance(decision, list) else [decision])
        return decision

    def check_sync(self, call: Any, tools: Any, history: Any = None) -> Decision | list[Decision]:
        decision = super().check_sync(call, tools, history)
        self.decisions.extend(decision if isinstance(decision, list) else [decision])
        return decision


# --- the gate's own words never ground a value (issue 20, item 1) -------------------------------


@pytest.mark.parametrize("hook", list(FRAMEWORKS))
async def test_a_hallucinated_call_repeated_after_its_refusal_is_refused_again(hook):
    """The refusal quotes "Tokyo"; that quote must not ground "Tokyo" for the cascade next round."""
    steps: list[Step] = [[weather("Tokyo", "c1")], [weather("Tokyo", "c2")], "I could not get the weather."]
    with FakeJudge() as fake:
        hallucination(fake)
        policy = GatePolicy(judge_when="ungrounded")
        async with Gate(ReflectionConfig(judge=fake.config), policy=policy) as gate:
            outcome = await FRAMEWORKS[hook](gate, steps)
    assert outcome.error is None, outcome.error
    assert outcome.received == []
    assert '"Tokyo" not found in the conversation' in outcome.shown["c1"]  # what the refusal quoted
    assert outcome.shown["c2"].startswith('The call to "get_weather" was not run.')
    assert fake.requests  # the judge decided (the second time, perhaps from the gate's reply cache)


async def test_openai_agents_a_hallucinated_call_repeated_in_a_follow_up_run_is_refused_again():
    """In the SDK the refusal reaches the gate in the next run's input (`to_input_list()`)."""
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    from reflection.integrations.openai_agents import guard_tools

    set_tracing_disabled(True)
    received: list[dict[str, Any]] = []
    model = ScriptedModel(
        [
            [function_call(*weather("Tokyo", "c1")[:2], call_id="c1")],
            [assistant_message("I could not get the weather.")],
            [function_call(*weather("Tokyo", "c2")[:2], call_id="c2")],
            [assistant_message("Still nothing.")],
        ]
    )
    with FakeJudge() as fake:
        hallucination(fake)
        async with Gate(ReflectionConfig(judge=fake.config), policy=GatePolicy(judge_when="ungrounded")) as gate:
            tools = guard_tools([function_tool(fn) for fn in weather_tools(received)], gate)
            agent = Agent(name="weather", model=model, tools=tools)
            first = await Runner.run(agent, QUESTION)
            await Runner.run(agent, [*first.to_input_list(), {"role": "user", "content": "Please try again."}])
    assert received == []


# --- a repeated bad call ------------------------------------------------------------------------


@pytest.mark.parametrize("on_invalid", ["reflect", "deny"])
async def test_a_call_repeated_unchanged_never_runs_and_every_attempt_gets_the_same_feedback(framework, on_invalid):
    steps: list[Step] = [[weather("Paris", f"c{i}", units="kelvin")] for i in range(1, 5)] + ["No weather, sorry."]
    async with RecordingGate(ReflectionConfig(), policy=GatePolicy(on_invalid=on_invalid)) as gate:
        gate.decisions = []
        outcome = await FRAMEWORKS[framework](gate, steps)
    assert outcome.error is None, outcome.error  # no "exceeded max retries": a refusal costs no retry
    assert outcome.received == []
    assert outcome.final == "No weather, sorry."
    assert [d.action for d in gate.decisions] == [on_invalid] * 4
    # The model is shown the gate's feedback exactly as the gate wrote it, so the gate can
    # recognise its own words when they come back in the conversation.
    assert [outcome.shown[f"c{i}"] for i in range(1, 5)] == [d.feedback for d in gate.decisions]
    text = outcome.shown["c1"]
    assert text.startswith('The call to "get_weather" ' + HEADERS[on_invalid]) and text.count("The call to") == 1
    assert '"kelvin"' in text


# --- parallel calls -----------------------------------------------------------------------------


async def test_parallel_calls_run_the_valid_one_once_and_the_refused_one_only_when_fixed(framework):
    steps: list[Step] = [
        [weather("Paris", "c1"), weather("Paris", "c2", units="kelvin")],
        [weather("Paris", "c3", units="fahrenheit")],
        "12 degrees in Paris.",
    ]
    async with Gate(ReflectionConfig()) as gate:
        outcome = await FRAMEWORKS[framework](gate, steps)
    assert outcome.error is None, outcome.error
    assert outcome.received == [
        {"tool": "get_weather", "city": "Paris", "units": "celsius"},
        {"tool": "get_weather", "city": "Paris", "units": "fahrenheit"},
    ]
    assert outcome.shown["c1"] == "12 degrees celsius in Paris"
    assert outcome.shown["c2"].startswith('The call to "get_weather" was not run.')
    assert outcome.shown["c3"] == "12 degrees fahrenheit in Paris"


async def test_parallel_calls_with_a_correctable_one_run_each_call_once_and_say_what_changed(framework):
    """The correctable call runs corrected (and says so) where the framework lets a hook rewrite
    arguments; the OpenAI Agents SDK cannot, so there the model is sent the correction and
    makes it itself. Either way the tool receives each call once, corrected."""
    resend = [[weather("Paris", "c3", units="celsius")]] if framework == "openai_agents" else []
    steps: list[Step] = [
        [weather("Paris", "c1", units="Celsius"), ("delete_forecast", {"city": "Oslo"}, "c2")],
        *resend,
        "Done.",
    ]
    async with Gate(ReflectionConfig()) as gate:
        outcome = await FRAMEWORKS[framework](gate, steps)
    assert outcome.error is None, outcome.error
    assert sorted(outcome.received, key=str) == sorted(
        [{"tool": "get_weather", "city": "Paris", "units": "celsius"}, {"tool": "delete_forecast", "city": "Oslo"}],
        key=str,
    )
    assert outcome.shown["c2"] == "deleted the forecast for Oslo"
    note = (
        "Note from reflection: the call was corrected before it ran: "
        '$.units: changed "Celsius" to the allowed value "celsius".'
    )
    if framework == "openai_agents":
        assert outcome.shown["c1"].endswith(
            'Suggested call (passes the static checks): "get_weather" {"city":"Paris","units":"celsius"}'
        )
        assert outcome.shown["c3"] == "12 degrees celsius in Paris"
    elif framework in ("langchain", "langgraph_sync"):
        assert outcome.shown["c1"] == f"12 degrees celsius in Paris\n\n{note}"
    else:  # Pydantic AI: the note is in the tool return's metadata, for the application
        assert outcome.shown["c1"] == "12 degrees celsius in Paris"


# --- a misspelled tool name -----------------------------------------------------------------------


async def test_a_misspelled_tool_name_never_runs_a_tool(framework):
    """Every framework refuses a name it does not know before its hook runs; nothing runs under
    the misspelled name or as the tool it resembles, and the properly named retry runs once."""
    steps: list[Step] = [
        [("get_wether", {"city": "Paris", "units": "celsius"}, "c1")],
        [weather("Paris", "c2")],
        "12 degrees.",
    ]
    async with Gate(ReflectionConfig()) as gate:
        outcome = await FRAMEWORKS[framework](gate, steps)
    if framework == "openai_agents":  # the SDK ends the run on an unknown tool
        assert outcome.received == []
        assert "get_wether not found" in str(outcome.error)
        return
    assert outcome.error is None, outcome.error
    assert outcome.received == [{"tool": "get_weather", "city": "Paris", "units": "celsius"}]
    assert "get_wether" in outcome.shown["c1"] and "get_weather" in outcome.shown["c1"]


# --- a judge error on the re-ask ------------------------------------------------------------------


@pytest.mark.parametrize(("risk", "runs"), [("low", True), ("high", False)])
async def test_a_judge_error_on_the_re_ask_falls_back_to_the_policy_for_the_tools_risk(framework, risk, runs):
    """Round one: the judge fails the hallucinated call. Round two, the fixed call: the judge
    answers HTTP 500 every time; a low-risk tool fails open, a high-risk one fails closed."""
    steps: list[Step] = [[weather("Tokyo", "c1")], [weather("Paris", "c2")], "Done."]
    with FakeJudge() as fake:
        fake.reply_json(
            {
                "general_hallucination_check": {
                    "score": 1,
                    "explanation": "Tokyo appears nowhere",
                    "evidence": [],
                    "confidence": 0.9,
                }
            }
        )
        fake.fail(500, times=3)  # every attempt of the second request
        policy = GatePolicy(tools=(ToolRule(match="get_weather", risk=risk),))
        async with Gate(
            ReflectionConfig(judge=fake.config, checks=("general_hallucination_check",)), policy=policy
        ) as gate:
            outcome = await FRAMEWORKS[framework](gate, steps)
    assert outcome.error is None, outcome.error
    assert outcome.shown["c1"].startswith('The call to "get_weather" was not run.')
    if runs:
        assert outcome.received == [{"tool": "get_weather", "city": "Paris", "units": "celsius"}]
        assert outcome.shown["c2"] == "12 degrees celsius in Paris"
    else:
        assert outcome.received == []
        assert "HTTP 500" in outcome.shown["c2"]
