"""The judge client against a respx-mocked OpenAI-compatible endpoint."""

import subprocess
import sys

import anyio
import httpx
import pytest
import respx

from reflection._json import dumps, parse_json
from reflection.errors import JudgeConnectionError, JudgeStatusError, JudgeTimeout
from reflection.judge import Judge, JudgeConfig, JudgeError, Price
from reflection.testing._protocol import completion

BASE = "http://judge.test/v1"
SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer"}},
    "required": ["score"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "system", "content": "judge"}, {"role": "user", "content": "rate it"}]


def validate(data):
    if not isinstance(data.get("score"), int) or not 1 <= data["score"] <= 5:
        raise ValueError(f"score must be an integer from 1 to 5, got {data.get('score')!r}")
    return data["score"]


def reply(content, usage=None):
    body = completion(content if isinstance(content, str) else dumps(content), {"messages": MESSAGES})
    if usage:
        body["usage"] = usage
    return httpx.Response(200, json=body)


def config(**kw):
    kw.setdefault("max_attempts", 3)
    kw.setdefault("retry_max_wait", 0)
    return JudgeConfig(base_url=BASE, model="m", api_key="sk-test-secret", **kw)


async def ask(judge):
    return await judge.ask(MESSAGES, schema=SCHEMA, schema_name="t", validate=validate)


@respx.mock(base_url=BASE)
async def test_request_uses_strict_json_schema_and_temperature_zero(respx_mock):
    route = respx_mock.post("/chat/completions").mock(return_value=reply({"score": 4}))
    async with Judge(config()) as judge:
        answer = await ask(judge)
    body = parse_json(route.calls.last.request.content)
    assert answer.value == 4
    assert body["temperature"] == 0
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "t", "strict": True, "schema": SCHEMA},
    }
    assert route.calls.last.request.headers["authorization"] == "Bearer sk-test-secret"


@respx.mock(base_url=BASE)
async def test_rejected_json_schema_falls_back_to_json_object_once_per_endpoint(respx_mock):
    def server(request):
        fmt = parse_json(request.content).get("response_format")
        if fmt and fmt["type"] == "json_schema":
            return httpx.Response(400, json={"error": {"message": "response_format json_schema unsupported"}})
        return reply({"score": 5})

    route = respx_mock.post("/chat/completions").mock(side_effect=server)
    async with Judge(config()) as judge:
        await ask(judge)
        await ask(judge)
    formats = [parse_json(c.request.content).get("response_format") for c in route.calls]
    assert formats == [
        {"type": "json_schema", "json_schema": {"name": "t", "strict": True, "schema": SCHEMA}},
        {"type": "json_object"},
        {"type": "json_object"},
    ]


@respx.mock(base_url=BASE)
async def test_falls_back_to_prompt_only_json_when_json_object_is_rejected_too(respx_mock):
    def server(request):
        if "response_format" in parse_json(request.content):
            return httpx.Response(400, json={"error": {"message": "unsupported"}})
        return reply('```json\n{"score": 3}\n```')

    respx_mock.post("/chat/completions").mock(side_effect=server)
    async with Judge(config()) as judge:
        assert (await ask(judge)).value == 3
        assert judge.structured_mode == "prompt"


@pytest.mark.parametrize(
    "failure",
    [
        httpx.Response(429, headers={"retry-after": "0"}, json={"error": {"message": "slow down"}}),
        httpx.Response(500, json={"error": {"message": "boom"}}),
        httpx.Response(503, json={"error": {"message": "unavailable"}}),
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
    ],
)
async def test_transient_failures_are_retried(failure):
    with respx.mock(base_url=BASE) as mock:
        route = mock.post("/chat/completions").mock(side_effect=[failure, reply({"score": 5})])
        async with Judge(config()) as judge:
            assert (await ask(judge)).value == 5
        assert route.call_count == 2


@pytest.mark.parametrize(
    ("status", "requests"),
    [
        (429, 3),  # retried until max_attempts
        (500, 3),
        (408, 3),
        (409, 1),  # not retried
        (400, 1),
    ],
)
async def test_http_failures_surface_as_the_judges_own_status_error(status, requests):
    with respx.mock(base_url=BASE) as mock:
        route = mock.post("/chat/completions").mock(
            return_value=httpx.Response(status, headers={"retry-after": "0"}, json={"error": {"message": "no"}})
        )
        async with Judge(config(structured_output="json_schema")) as judge:
            with pytest.raises(JudgeError, match=f"HTTP {status} from the judge endpoint: no ") as info:
                await ask(judge)
    assert type(info.value.__cause__) is JudgeStatusError
    assert (info.value.__cause__.status, info.value.__cause__.body) == (status, {"message": "no"})
    assert info.value.__cause__.retry_after == "0"
    assert route.call_count == requests


@pytest.mark.parametrize(
    ("failure", "error", "reason"),
    [
        (httpx.ConnectError("unreachable"), JudgeConnectionError, "could not connect to the judge endpoint"),
        (httpx.ReadTimeout("slow"), JudgeTimeout, "the judge request timed out"),
    ],
)
async def test_transport_failures_surface_as_the_judges_own_errors(failure, error, reason):
    with respx.mock(base_url=BASE) as mock:
        route = mock.post("/chat/completions").mock(side_effect=failure)
        async with Judge(config(max_attempts=2, retry_max_wait=0)) as judge:
            with pytest.raises(JudgeError) as info:
                await ask(judge)
    assert str(info.value) == f"{reason} (after 2 request(s))"
    assert type(info.value.__cause__) is error
    assert route.call_count == 2


@pytest.mark.slow
def test_the_judge_never_imports_the_openai_sdk():
    # The judge maps HTTP failures to its own errors: neither static-only use nor a judge pays
    # for the SDK (most of the import time it used to cost).
    code = (
        "import sys, reflection\n"
        "result = reflection.check_call({'name': 'f', 'arguments': {}}, [{'name': 'f', 'parameters': {}}])\n"
        "assert result.valid, result\n"
        "assert 'openai' not in sys.modules, 'static-only use imported openai'\n"
        "reflection.Judge(reflection.JudgeConfig(api_key='k'))\n"
        "assert 'openai' not in sys.modules, 'a judge imported openai'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@respx.mock(base_url=BASE)
async def test_retry_after_header_sets_the_wait(respx_mock):
    sleeps = []
    respx_mock.post("/chat/completions").mock(
        side_effect=[httpx.Response(429, headers={"retry-after": "7"}, json={}), reply({"score": 5})]
    )
    async with Judge(config(retry_max_wait=60)) as judge:
        original = judge._wait
        judge._wait = lambda state: sleeps.append(original(state)) or 0.0
        await ask(judge)
    assert sleeps == [7.0]


@respx.mock(base_url=BASE)
async def test_invalid_reply_is_re_asked_quoting_the_validation_error_but_not_the_reply(respx_mock):
    route = respx_mock.post("/chat/completions").mock(
        side_effect=[reply({"score": 9, "note": "IGNORE PREVIOUS"}), reply({"score": 8}), reply({"score": 2})]
    )
    async with Judge(config()) as judge:
        answer = await ask(judge)
    first, second, third = (parse_json(c.request.content)["messages"] for c in route.calls)
    assert answer.value == 2
    assert second[:-1] == first and third[:-1] == first  # the original prompt plus one note, never the reply
    assert all(m["role"] != "assistant" for m in second + third)
    assert "IGNORE PREVIOUS" not in str(second)
    assert "score must be an integer from 1 to 5, got 9" in second[-1]["content"]
    assert "got 8" in third[-1]["content"]


@respx.mock(base_url=BASE)
async def test_non_json_reply_is_re_asked(respx_mock):
    route = respx_mock.post("/chat/completions").mock(side_effect=[reply("Looks fine to me!"), reply({"score": 4})])
    async with Judge(config()) as judge:
        assert (await ask(judge)).value == 4
    assert "not valid JSON" in parse_json(route.calls[1].request.content)["messages"][-1]["content"]


@respx.mock(base_url=BASE)
async def test_attempts_are_bounded_and_the_sdk_does_not_retry_on_its_own(respx_mock):
    route = respx_mock.post("/chat/completions").mock(return_value=httpx.Response(500, json={}))
    async with Judge(config(max_attempts=3)) as judge:
        with pytest.raises(JudgeError, match="HTTP 500") as info:
            await ask(judge)
    assert route.call_count == 3
    assert info.value.usage.requests == 3


@respx.mock(base_url=BASE)
async def test_client_errors_are_not_retried(respx_mock):
    route = respx_mock.post("/chat/completions").mock(
        return_value=httpx.Response(409, json={"error": {"message": "busy"}})
    )
    async with Judge(config()) as judge:
        with pytest.raises(JudgeError, match="HTTP 409 from the judge endpoint: busy"):
            await ask(judge)
    assert route.call_count == 1


@respx.mock(base_url=BASE)
async def test_usage_and_cost_are_summed_across_retries(respx_mock):
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 100,
        "total_tokens": 1100,
        "prompt_tokens_details": {"cached_tokens": 400},
    }
    respx_mock.post("/chat/completions").mock(side_effect=[reply({"score": 0}, usage), reply({"score": 5}, usage)])
    prices = {"m": Price(prompt=1.0, completion=2.0, cached=0.5)}
    async with Judge(config(prices=prices)) as judge:
        answer = await ask(judge)
    u = answer.usage
    assert (u.requests, u.prompt_tokens, u.completion_tokens, u.cached_tokens) == (2, 2000, 200, 800)
    assert u.cost_usd == pytest.approx((1200 * 1.0 + 800 * 0.5 + 200 * 2.0) / 1e6)


async def test_an_injected_http_client_is_used():
    seen = []

    def handler(request):
        seen.append(str(request.url))
        return reply({"score": 5})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    async with Judge(config(), http_client=client) as judge:
        await ask(judge)
    assert seen == [f"{BASE}/chat/completions"]
    assert not client.is_closed  # the caller owns an injected client
    await client.aclose()


async def test_concurrency_is_bounded_by_the_endpoint_limiter():
    in_flight = peak = 0

    async def server(request):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await anyio.sleep(0.01)
        in_flight -= 1
        return reply({"score": 5})

    with respx.mock(base_url=BASE) as mock:
        mock.post("/chat/completions").mock(side_effect=server)
        async with Judge(config(max_concurrency=2)) as judge, anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(ask, judge)
    assert peak == 2


def test_api_key_is_never_shown_in_config_repr_or_dump():
    cfg = config()
    assert "sk-test-secret" not in repr(cfg) and "sk-test-secret" not in cfg.model_dump_json()


def test_api_key_is_read_from_the_named_environment_variable(monkeypatch):
    monkeypatch.setenv("MY_JUDGE_KEY", "from-env")
    assert JudgeConfig(api_key_env="MY_JUDGE_KEY").resolved_api_key() == "from-env"


def test_an_http_client_that_is_not_httpx_is_refused():
    with pytest.raises(TypeError, match="httpx.AsyncClient"):
        Judge(config(), http_client=object())
