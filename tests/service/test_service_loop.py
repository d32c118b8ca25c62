"""The gate in a real agent loop through the service: the gateway (openai client, streamed and not) and
the LiteLLM guardrail route in the request shapes LiteLLM sends, with a stand-in judge that fails a
value found nowhere in the conversation. A model that repeats its hallucinated call after reading the
gate's feedback is refused again; a route that gets no conversation does not call every value a
hallucination."""

from __future__ import annotations

import json

import httpx
import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

from _service_support import TOOLS, ServiceProcess  # noqa: E402

from reflection.testing.server import StandInJudge  # noqa: E402
from reflection.testing.upstream import StandInModel  # noqa: E402

pytestmark = pytest.mark.slow  # processes, servers or a browser: `pytest -m "not slow"` leaves them out

TOKYO = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Tokyo", "days": 2}}]}
PARIS = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]}
SCRIPT = {"stubborn": [TOKYO], "learns": [TOKYO, PARIS]}
QUESTION = [{"role": "user", "content": "What's the weather in Paris for the next 2 days?"}]
KEY = "service-key-0123456789"


@pytest.fixture(scope="module")
def model():
    with StandInModel(SCRIPT, idle_timeout=180) as server:
        yield server


@pytest.fixture(scope="module")
def service(tmp_path_factory, model):
    with StandInJudge(idle_timeout=180) as judge:
        config = {
            "judge": {"base_url": judge.base_url, "model": "stand-in"},
            "gate": {"judge_when": "ungrounded"},
            "service": {"api_keys": [KEY]},
            "upstream": {"base_url": model.base_url, "max_reflect_rounds": 2},
        }
        server = ServiceProcess(tmp_path_factory.mktemp("loop"), config).start()
        yield server
        server.stop()


@pytest.fixture(scope="module")
def client(service):
    with openai.OpenAI(
        base_url=service.url + "/v1",
        api_key="sk-upstream",
        max_retries=0,
        default_headers={"x-reflection-api-key": KEY},
    ) as c:
        yield c


def test_the_gateway_never_lets_a_repeated_hallucination_through(client):
    completion = client.chat.completions.create(model="stubborn", messages=QUESTION, tools=TOOLS)
    message = completion.choices[0].message
    assert message.tool_calls is None
    assert [d["action"] for d in completion.reflection["decisions"]] == ["reflect", "reflect", "reflect"]
    assert completion.reflection["actions"] == ["deny"]


def test_the_gateway_lets_the_corrected_call_through(client):
    completion = client.chat.completions.create(model="learns", messages=QUESTION, tools=TOOLS)
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in completion.choices[0].message.tool_calls]
    assert calls == [("get_weather", {"city": "Paris", "days": 2})]


def test_a_streamed_repeated_hallucination_is_refused_too(client):
    names = [
        part.function.name
        for chunk in client.chat.completions.create(model="stubborn", messages=QUESTION, tools=TOOLS, stream=True)
        for choice in chunk.choices
        for part in choice.delta.tool_calls or []
        if part.function.name
    ]
    assert names == []


def _guardrail(service, body, **headers):
    return httpx.post(
        service.url + "/beta/litellm_basic_guardrail_api",
        json=body,
        timeout=30,
        headers=headers or {"x-reflection-api-key": KEY},
    )


CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 2}'},
}


def test_post_call_without_a_conversation_does_not_call_every_value_a_hallucination(service):
    # What LiteLLM sends after the model answered: the calls, no messages, tools from the config.
    body = {
        "texts": [],
        "tool_calls": [CALL],
        "input_type": "response",
        "request_data": {},
        "additional_provider_specific_params": {"tools": TOOLS},
    }
    answer = _guardrail(service, body).json()
    assert answer["action"] == "NONE", answer
    semantic = answer["reflection"]["decisions"][0]["result"]["semantic"]
    assert semantic["general_hallucination_check"]["status"] == "skipped"
    assert semantic["general_value_format_alignment"]["status"] == "passed"


def test_pre_call_with_the_conversation_still_catches_a_hallucination(service):
    tokyo = {**CALL, "function": {"name": "get_weather", "arguments": '{"city": "Tokyo", "days": 2}'}}
    body = {
        "texts": [],
        "tools": TOOLS,
        "tool_calls": [tokyo],
        "structured_messages": QUESTION,
        "input_type": "request",
    }
    answer = _guardrail(service, body).json()
    assert answer["action"] == "BLOCKED"
    assert answer["blocked_reason"].startswith('tool call "get_weather" (reflect)')


def test_litellms_api_key_setting_is_accepted(service):
    body = {"texts": [], "tool_calls": [], "input_type": "request"}
    assert _guardrail(service, body, **{"x-api-key": KEY}).status_code == 200
    assert _guardrail(service, body, **{"x-api-key": "wrong"}).status_code == 401


def test_the_service_key_is_never_forwarded_upstream(client, model):
    client.chat.completions.create(model="learns", messages=QUESTION, tools=TOOLS)
    sent = list(model.headers)
    assert sent and all(KEY not in value for headers in sent for value in headers.values())
    assert sent[-1]["authorization"] == "Bearer sk-upstream"  # the client's own upstream key passes
