"""The gateway's Responses API (`POST /v1/responses`) as a real process, driven by the official `openai`
client (`client.responses.create`, streamed and not) and the OpenAI Agents SDK's default Responses
model, in front of a stand-in model that speaks the Responses API."""

from __future__ import annotations

import json

import httpx
import pytest

pytestmark = pytest.mark.slow  # real processes and servers

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

from _fixed_upstream import FixedUpstream  # noqa: E402
from _service_support import ServiceProcess  # noqa: E402

from reflection.testing.server import StandInJudge  # noqa: E402
from reflection.testing.upstream import StandInModel  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The forecast for a city.",
        "strict": False,
        "parameters": {
            "type": "object",
            "required": ["city"],
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        },
    }
]
QUESTION = "What's the weather in Paris for the next 2 days?"
GOOD = {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}
VALID = {"content": "Let me look that up.", "tool_calls": [GOOD]}
FIXABLE = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": "2"}}]}
HALLUCINATED = {"tool_calls": [{"name": "get_forecast_for_city", "arguments": {"city": "Paris"}}]}
SCRIPT = {
    "valid": [VALID],
    "fixable": [FIXABLE],
    "hallucinated": [HALLUCINATED, {"tool_calls": [GOOD]}],
    "stubborn": [HALLUCINATED],
    "gives-up": [HALLUCINATED, {"content": "Which city do you mean?"}],
    "parallel": [
        {"tool_calls": [GOOD, HALLUCINATED["tool_calls"][0]]},
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}, GOOD]},
    ],
    "rate-limited": [
        {"status": 429, "error": {"message": "slow down", "type": "rate_limit"}, "headers": {"retry-after": "7"}}
    ],
    "reask-limited": [
        HALLUCINATED,
        {"status": 429, "error": {"message": "slow down"}, "headers": {"retry-after": "7"}},
    ],
    "agent": [HALLUCINATED, {"tool_calls": [GOOD]}, {"content": "It will be sunny in Paris."}],
    "tokyo": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Tokyo", "days": 2}}]}],
}
ROUNDS = 2


@pytest.fixture(scope="module")
def upstream():
    with StandInModel(SCRIPT, idle_timeout=180) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, upstream):
    config = {"upstream": {"base_url": upstream.base_url, "max_reflect_rounds": ROUNDS}}
    server = ServiceProcess(tmp_path_factory.mktemp("responses"), config).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(gateway):
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-client-key", max_retries=0) as c:
        yield c


def _create(client, model, **extra):
    raw = client.responses.with_raw_response.create(model=model, input=QUESTION, tools=TOOLS, **extra)
    return raw.parse(), raw.headers


def _calls(response) -> list[tuple[str, dict]]:
    return [(item.name, json.loads(item.arguments)) for item in response.output if item.type == "function_call"]


def test_a_valid_call_passes_through(client):
    response, headers = _create(client, "valid")
    assert _calls(response) == [("get_weather", {"city": "Paris", "days": 2})]
    assert response.output_text == "Let me look that up."
    assert headers["x-reflection-actions"] == "allow" and headers["x-reflection-rounds"] == "0"
    assert response.reflection["decisions"][0]["call_id"] == response.output[1].call_id


def test_a_fixable_call_is_replaced_by_its_correction_under_its_call_id(client):
    response, headers = _create(client, "fixable")
    [call] = [item for item in response.output if item.type == "function_call"]
    assert json.loads(call.arguments) == {"city": "Paris", "days": 2}
    assert call.call_id.startswith("call_") and headers["x-reflection-actions"] == "modify"


def test_a_hallucinated_call_is_asked_again_with_the_whole_turn_and_the_new_call_used(client, upstream):
    response, headers = _create(client, "hallucinated", instructions="You are a weather bot.")
    assert _calls(response) == [("get_weather", {"city": "Paris", "days": 2})]
    assert [d["action"] for d in response.reflection["decisions"]] == ["reflect", "allow"]
    assert headers["x-reflection-rounds"] == "1"
    reask = upstream.requests[-1]
    assert reask["instructions"] == "You are a weather bot." and "stream" not in reask
    assert reask["input"][0] == {"role": "user", "content": QUESTION}
    turn, result = reask["input"][1], reask["input"][2]
    assert turn["type"] == "function_call" and turn["name"] == "get_forecast_for_city"
    assert result["type"] == "function_call_output" and result["call_id"] == turn["call_id"]
    assert "non_existent_function" in result["output"]


def test_a_call_still_refused_after_the_rounds_is_denied_with_a_message_saying_why(client, upstream):
    before = len(upstream.requests)
    response, headers = _create(client, "stubborn")
    assert _calls(response) == []
    assert response.output_text.startswith('The call to "get_forecast_for_city" was blocked by reflection')
    assert headers["x-reflection-actions"] == "deny" and headers["x-reflection-rounds"] == str(ROUNDS)
    assert len(upstream.requests) - before == 1 + ROUNDS
    assert response.usage.total_tokens == 30 * (1 + ROUNDS)  # every round's usage


def test_a_model_that_answers_in_words_after_feedback_is_answered_with_them(client):
    response, headers = _create(client, "gives-up")
    assert response.output_text == "Which city do you mean?" and _calls(response) == []
    assert headers["x-reflection-actions"] == "reflect"


def test_parallel_calls_reach_the_client_once_each_with_unique_ids(client, upstream):
    response, _ = _create(client, "parallel")
    assert _calls(response) == [("get_weather", {"city": "Paris", "days": 2}), ("get_weather", {"city": "Oslo"})]
    ids = [item.call_id for item in response.output if item.type == "function_call"]
    assert len(set(ids)) == 2
    outputs = [item for item in upstream.requests[-1]["input"] if item.get("type") == "function_call_output"]
    assert "accepted" in outputs[0]["output"] and "non_existent_function" in outputs[1]["output"]


def test_hosted_tools_are_not_specs_and_break_nothing(client):
    response = client.responses.create(model="valid", input=QUESTION, tools=[{"type": "web_search"}, *TOOLS])
    assert _calls(response) == [("get_weather", {"city": "Paris", "days": 2})]
    assert response.reflection["actions"] == ["allow"]


def test_upstream_errors_reach_the_client_unchanged(client):
    with pytest.raises(openai.RateLimitError) as caught:
        _create(client, "rate-limited")
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.body == {"message": "slow down", "type": "rate_limit"}
    with pytest.raises(openai.RateLimitError):
        _create(client, "reask-limited")


def test_a_request_without_tools_passes_through_untouched(gateway, upstream):
    body = b'{"model": "plain",  "input": "hi"}'
    response = httpx.post(
        gateway.url + "/v1/responses", content=body, timeout=30, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200 and upstream.raw_requests[-1] == body
    assert "reflection" not in response.json()


def test_an_item_the_gateway_cannot_check_is_removed(tmp_path):
    shell = {
        "type": "local_shell_call",
        "id": "ls_1",
        "call_id": "call_ls",
        "status": "completed",
        "action": {"type": "exec", "command": ["rm", "-rf", "/"], "env": {}},
    }
    reply = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": "m",
        "output": [shell],
        "usage": None,
    }
    with FixedUpstream(reply) as up:
        server = ServiceProcess(tmp_path, {"upstream": {"base_url": up}}).start()
        try:
            data = httpx.post(
                server.url + "/v1/responses",
                timeout=30,
                json={"model": "m", "input": QUESTION, "tools": [{"type": "local_shell"}]},
            ).json()
        finally:
            server.stop()
    assert [item["type"] for item in data["output"]] == ["message"]
    assert "local_shell_call" in data["output"][0]["content"][0]["text"] and data["reflection"]["actions"] == ["deny"]


# --- streaming ------------------------------------------------------------------------------------


def _stream(client, model, **extra):
    return list(client.responses.create(model=model, input=QUESTION, tools=TOOLS, stream=True, **extra))


def test_streamed_text_passes_and_a_valid_call_arrives_whole_after_it(client):
    events = _stream(client, "valid")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "Let me look that up." and len(deltas) == 5
    assert kinds.index("response.function_call_arguments.delta") > kinds.index("response.output_text.done")
    [arguments] = [e for e in events if e.type == "response.function_call_arguments.delta"]
    assert json.loads(arguments.delta) == {"city": "Paris", "days": 2} and arguments.output_index == 1
    completed = events[-1]
    assert completed.type == "response.completed"
    assert [item.type for item in completed.response.output] == ["message", "function_call"]
    assert completed.response.reflection["actions"] == ["allow"]


def test_a_streamed_hallucinated_call_is_replaced_by_the_reasked_one(client):
    events = _stream(client, "hallucinated")
    names = [e.item.name for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    assert names == ["get_weather"]
    assert _calls(events[-1].response) == [("get_weather", {"city": "Paris", "days": 2})]
    # The upstream keeps the conversation under the re-ask's id: previous_response_id continues from there.
    assert events[-1].response.id != events[0].response.id


def test_a_streamed_call_that_stays_refused_becomes_a_message(client):
    events = _stream(client, "stubborn")
    assert not [e for e in events if getattr(e, "item", None) is not None and e.item.type == "function_call"]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    completed = events[-1].response
    assert text == completed.output_text and text.startswith('The call to "get_forecast_for_city" was blocked')
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert completed.reflection["actions"] == ["deny"]


def test_the_stream_and_the_plain_reply_say_the_same(client):
    plain, _ = _create(client, "stubborn")
    assert _stream(client, "stubborn")[-1].response.output_text == plain.output_text


def test_an_upstream_error_on_a_streamed_reask_ends_the_stream_with_an_error(client):
    with pytest.raises(openai.APIError, match="slow down"):
        _stream(client, "reask-limited")


# --- previous_response_id -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def judged(tmp_path_factory, upstream):
    with StandInJudge(idle_timeout=180) as judge:
        config = {
            "judge": {"base_url": judge.base_url, "model": "stand-in"},
            "gate": {"judge_when": "ungrounded"},
            "upstream": {"base_url": upstream.base_url, "max_reflect_rounds": 0},
        }
        server = ServiceProcess(tmp_path_factory.mktemp("judged"), config).start()
        yield server
        server.stop()


def test_previous_response_id_gates_with_the_earlier_turns_the_gateway_relayed(judged):
    with openai.OpenAI(base_url=judged.url + "/v1", api_key="sk-a", max_retries=0) as client:
        first = client.responses.create(model="valid", input="What's the weather in Tokyo for 2 days?", tools=TOOLS)
        follow = client.responses.create(
            model="tokyo", input="And again please.", tools=TOOLS, previous_response_id=first.id
        )
        assert _calls(follow) == [("get_weather", {"city": "Tokyo", "days": 2})]
        unknown = client.responses.create(
            model="tokyo", input="And again please.", tools=TOOLS, previous_response_id="resp_not_relayed_here"
        )
        assert _calls(unknown) == [] and unknown.reflection["actions"] == ["deny"]
    with openai.OpenAI(base_url=judged.url + "/v1", api_key="sk-b", max_retries=0) as other:
        theirs = other.responses.create(
            model="tokyo", input="And again please.", tools=TOOLS, previous_response_id=first.id
        )
        assert _calls(theirs) == []  # another client's turns are never its evidence


def test_a_streamed_response_is_remembered_for_the_next_turn(judged):
    with openai.OpenAI(base_url=judged.url + "/v1", api_key="sk-c", max_retries=0) as client:
        events = list(
            client.responses.create(model="valid", input="Weather in Tokyo for 2 days?", tools=TOOLS, stream=True)
        )
        follow = client.responses.create(
            model="tokyo", input="Again.", tools=TOOLS, previous_response_id=events[-1].response.id
        )
        assert _calls(follow) == [("get_weather", {"city": "Tokyo", "days": 2})]


# --- the OpenAI Agents SDK's default model ----------------------------------------------------------


def _agent(gateway, seen):
    agents = pytest.importorskip("agents")

    @agents.function_tool
    def get_weather(city: str, days: int = 1) -> str:
        """The forecast for a city."""
        seen.append({"city": city, "days": days})
        return "sunny"

    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="sk-agent", max_retries=0)
    model = agents.OpenAIResponsesModel(model="agent", openai_client=client)
    return agents, agents.Agent(
        name="weather", instructions="Answer with the forecast.", tools=[get_weather], model=model
    )


def test_the_agents_sdk_runs_only_checked_calls(gateway):
    seen: list[dict] = []
    agents, agent = _agent(gateway, seen)
    result = agents.Runner.run_sync(agent, QUESTION, run_config=agents.RunConfig(tracing_disabled=True))
    assert result.final_output == "It will be sunny in Paris."
    assert seen and all(call == {"city": "Paris", "days": 2} for call in seen)


def test_the_agents_sdk_streamed_runs_only_checked_calls(gateway):
    import asyncio

    seen: list[dict] = []
    agents, agent = _agent(gateway, seen)

    async def run() -> str:
        result = agents.Runner.run_streamed(agent, QUESTION, run_config=agents.RunConfig(tracing_disabled=True))
        async for _ in result.stream_events():
            pass
        return result.final_output

    assert asyncio.run(run()) == "It will be sunny in Paris."
    assert seen and all(call == {"city": "Paris", "days": 2} for call in seen)


# --- escalation, and the memory's bounds -------------------------------------------------------------


def test_an_escalated_call_is_held_for_approval_and_said_so(tmp_path, upstream):
    config = {"upstream": {"base_url": upstream.base_url}, "gate": {"on_invalid": "escalate"}}
    server = ServiceProcess(tmp_path, config).start()
    try:
        with openai.OpenAI(base_url=server.url + "/v1", api_key="sk", max_retries=0) as c:
            response, headers = _create(c, "stubborn")
    finally:
        server.stop()
    assert _calls(response) == [] and headers["x-reflection-actions"] == "escalate"
    assert response.reflection["escalated"][0]["call"]["name"] == "get_forecast_for_city"
    assert "waiting for a person's approval" in response.output_text  # for clients that drop `reflection`


def test_the_memory_follows_chains_per_client_within_its_bytes():
    from reflection.service._responses import ResponseMemory

    memory = ResponseMemory(100)
    memory.remember(b"a", "r1", None, ["one"], 40)
    memory.remember(b"a", "r2", "r1", ["two"], 40)
    assert memory.earlier(b"a", "r2") == ["one", "two"]
    assert memory.earlier(b"b", "r2") == [] and memory.earlier(b"a", "unknown") == []
    memory.remember(b"a", "r3", "r2", ["three"], 40)  # over 100 bytes: the least recently used goes
    assert memory.size <= 100 and memory.earlier(b"a", "r3") == ["two", "three"]
    memory.remember(b"a", "huge", "r3", ["x"], 101)  # larger than the whole memory: not kept
    assert memory.earlier(b"a", "huge") == []
    memory.remember(b"a", "loop", "loop", ["l"], 1)  # a cycle ends the walk
    assert memory.earlier(b"a", "loop") == ["l"]
