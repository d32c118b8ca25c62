"""The judge's transport against a respx-mocked endpoint: truncated replies, the structured-output
fallback, fatal errors, bounded bodies, usage sanity and key redaction."""

import logging

import httpx
import pytest
import respx

from reflection import JudgeFatalError
from reflection._json import dumps, parse_json
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
KEY = "sk-test-secret-0123456789"


def validate(data):
    if not isinstance(data, dict) or data.get("score") not in (1, 2, 3, 4, 5):
        raise ValueError(f"score must be an integer from 1 to 5, got {data!r}")
    return data["score"]


def reply(content, *, finish_reason="stop", usage=None):
    body = completion(content if isinstance(content, str) else dumps(content), {"messages": MESSAGES})
    body["choices"][0]["finish_reason"] = finish_reason
    if usage is not None:
        body["usage"] = usage
    return httpx.Response(200, json=body)


def config(**kw):
    kw.setdefault("max_attempts", 3)
    kw.setdefault("retry_max_wait", 0)
    return JudgeConfig(base_url=BASE, model="m", api_key=KEY, **kw)


async def ask(judge, cache_key=None):
    return await judge.ask(MESSAGES, schema=SCHEMA, schema_name="t", validate=validate, cache_key=cache_key)


def formats(route):
    return [(parse_json(c.request.content).get("response_format") or {}).get("type", "prompt") for c in route.calls]


# --- truncated replies (finish_reason "length") ----------------------------------------------


@respx.mock(base_url=BASE)
async def test_a_truncated_reply_is_asked_again_once_with_four_times_the_budget(respx_mock):
    route = respx_mock.post("/chat/completions").mock(
        side_effect=[reply('{"sco', finish_reason="length"), reply({"score": 4})]
    )
    async with Judge(config(max_completion_tokens=100)) as judge:
        answer = await ask(judge)
    assert answer.value == 4 and answer.usage.requests == 2
    budgets = [parse_json(c.request.content)["max_completion_tokens"] for c in route.calls]
    assert budgets == [100, 400]
    # The same conversation: the cut-off reply is not quoted back.
    assert parse_json(route.calls[1].request.content)["messages"] == MESSAGES


@respx.mock(base_url=BASE)
async def test_a_reply_truncated_twice_is_an_error_that_says_so(respx_mock):
    route = respx_mock.post("/chat/completions").mock(return_value=reply('{"sco', finish_reason="length"))
    async with Judge(config(max_completion_tokens=100)) as judge:
        with pytest.raises(JudgeError, match=r"truncated.*max_completion_tokens 100, then at 400") as info:
            await ask(judge)
    assert route.call_count == 2  # not re-asked by the retry loop: the same budget cannot help
    assert info.value.usage.requests == 2


# --- structured-output fallback --------------------------------------------------------------


@respx.mock(base_url=BASE)
async def test_a_context_length_400_does_not_downgrade_structured_output(respx_mock, caplog):
    too_long = httpx.Response(
        400,
        json={
            "error": {
                "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
    )
    route = respx_mock.post("/chat/completions").mock(side_effect=[too_long, reply({"score": 5})])
    async with Judge(config()) as judge:
        with pytest.raises(JudgeError, match="HTTP 400 from the judge endpoint: This model's maximum context length"):
            await ask(judge)
        assert judge.structured_mode == "json_schema"
        await ask(judge)
    assert formats(route) == ["json_schema", "json_schema"]
    assert "structured output" not in caplog.text


@respx.mock(base_url=BASE)
async def test_a_400_about_response_format_downgrades_once_and_logs_the_servers_message(respx_mock, caplog):
    def server(request):
        if (parse_json(request.content).get("response_format") or {}).get("type") == "json_schema":
            return httpx.Response(
                400,
                json={"error": {"message": "json_schema is not supported by this backend", "param": "response_format"}},
            )
        return reply({"score": 5})

    route = respx_mock.post("/chat/completions").mock(side_effect=server)
    with caplog.at_level(logging.WARNING, logger="reflection.judge"):
        async with Judge(config()) as judge:
            for _ in range(3):
                await ask(judge)
    assert formats(route) == ["json_schema", "json_object", "json_object", "json_object"]
    downgrades = [r.getMessage() for r in caplog.records if "structured output" in r.getMessage()]
    assert len(downgrades) == 1
    assert "json_schema is not supported by this backend" in downgrades[0] and "json_object" in downgrades[0]
    assert KEY not in caplog.text


@respx.mock(base_url=BASE)
async def test_an_unexplained_400_downgrades_only_when_the_lower_mode_then_succeeds(respx_mock):
    def server(request):
        if "response_format" in parse_json(request.content):
            return httpx.Response(400, json={"error": {"message": "bad request"}})
        return reply({"score": 5})

    route = respx_mock.post("/chat/completions").mock(side_effect=server)
    async with Judge(config()) as judge:
        await ask(judge)
        assert judge.structured_mode == "prompt"
        await ask(judge)
    assert formats(route) == ["json_schema", "json_object", "prompt", "prompt"]


@respx.mock(base_url=BASE)
async def test_an_unexplained_400_in_every_mode_changes_nothing(respx_mock):
    route = respx_mock.post("/chat/completions").mock(
        return_value=httpx.Response(400, json={"error": {"message": "bad request"}})
    )
    async with Judge(config()) as judge:
        with pytest.raises(JudgeError, match="HTTP 400"):
            await ask(judge)
        assert judge.structured_mode == "json_schema"
    assert formats(route) == ["json_schema", "json_object", "prompt"]


# --- fatal errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "message"),
    [(401, "Incorrect API key provided"), (403, "no access to this model"), (404, "The model `m` does not exist")],
)
async def test_401_403_404_are_fatal_with_the_url_status_and_server_message(status, message):
    from reflection.errors import JudgeStatusError

    with respx.mock(base_url=BASE) as mock:
        route = mock.post("/chat/completions").mock(
            return_value=httpx.Response(status, json={"error": {"message": message}})
        )
        async with Judge(config()) as judge:
            with pytest.raises(JudgeFatalError) as info:
                await ask(judge)
    key = "" if status == 404 else " (API key from judge.api_key)"  # a rejected key: where it came from
    assert str(info.value) == f"judge {BASE}/chat/completions: HTTP {status}: {message}{key}"
    assert (info.value.status, info.value.server_message) == (status, message)
    assert isinstance(info.value.__cause__, JudgeStatusError)
    assert not isinstance(info.value, JudgeError)  # never caught as a row's judge error
    assert route.call_count == 1


@respx.mock(base_url=BASE)
async def test_a_fatal_error_in_per_check_mode_is_raised_unwrapped(respx_mock):
    from reflection import ReflectionConfig, Reflector

    respx_mock.post("/chat/completions").mock(return_value=httpx.Response(401, json={"error": {"message": "bad key"}}))
    tools = [{"name": "f", "parameters": {"type": "object", "properties": {}}}]
    async with Reflector(ReflectionConfig(judge=config(), mode="per_check")) as reflector:
        with pytest.raises(JudgeFatalError, match="HTTP 401: bad key"):
            await reflector.reflect(
                [{"name": "f", "arguments": {}}, {"name": "f", "arguments": {}}],
                tools,
                [{"role": "user", "content": "go"}],
            )


@respx.mock(base_url=BASE)
async def test_error_messages_are_one_plain_line(respx_mock):
    respx_mock.post("/chat/completions").mock(
        return_value=httpx.Response(401, json={"error": {"message": "bad\nkey \x1b[31mred\x1b[0m " + "x" * 1000}})
    )
    async with Judge(config()) as judge:
        with pytest.raises(JudgeFatalError) as info:
            await ask(judge)
    text = str(info.value)
    assert "\n" not in text and "\x1b" not in text and len(text) < 400
    assert "HTTP 401: bad key [31mred [0m xxx" in text


@pytest.mark.parametrize(
    ("base_url", "warned"),
    [
        ("https://judge.example.com/v1", True),
        ("http://127.0.0.1:8000/v1", False),
        ("http://localhost:8000/v1", False),
        ("http://[::1]:8000/v1", False),
    ],
)
async def test_a_remote_endpoint_without_a_key_is_warned_about_once(base_url, warned, caplog):
    with respx.mock(base_url=base_url) as mock:
        mock.post("/chat/completions").mock(return_value=reply({"score": 5}))
        with caplog.at_level(logging.WARNING, logger="reflection.judge"):
            async with Judge(JudgeConfig(base_url=base_url, model="m")) as judge:
                await ask(judge)
                await ask(judge)
    lines = [r.getMessage() for r in caplog.records if "no API key" in r.getMessage()]
    assert len(lines) == (1 if warned else 0)
    if warned:
        assert "$OPENAI_API_KEY" in lines[0] and base_url in lines[0]


async def test_a_remote_endpoint_with_a_key_is_not_warned_about(caplog, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with respx.mock(base_url="https://judge.example.com/v1") as mock:
        mock.post("/chat/completions").mock(return_value=reply({"score": 5}))
        with caplog.at_level(logging.WARNING, logger="reflection.judge"):
            async with Judge(JudgeConfig(base_url="https://judge.example.com/v1", model="m")) as judge:
                await ask(judge)
    assert "no API key" not in caplog.text


def test_a_password_in_the_base_url_is_not_shown():
    from reflection.judge.client import _shown_url

    assert _shown_url(httpx.URL("https://user:pw@judge.example.com/v1?key=s")) == "https://judge.example.com/v1"


# --- bounded bodies --------------------------------------------------------------------------


@respx.mock(base_url=BASE)
async def test_a_response_over_max_response_bytes_is_an_error_and_not_retried(respx_mock):
    huge = dumps(completion("x" * 5000, {"messages": MESSAGES})).encode()
    route = respx_mock.post("/chat/completions").mock(
        return_value=httpx.Response(200, stream=httpx.ByteStream(huge), headers={"content-type": "application/json"})
    )
    async with Judge(config(max_response_bytes=2048)) as judge:
        with pytest.raises(JudgeError, match=r"exceeded max_response_bytes \(2,048 bytes\)"):
            await ask(judge)
    assert route.call_count == 1


@respx.mock(base_url=BASE)
async def test_a_declared_content_length_over_the_cap_is_refused_before_reading(respx_mock):
    respx_mock.post("/chat/completions").mock(return_value=httpx.Response(200, content=b"{" + b" " * 4000 + b"}"))
    async with Judge(config(max_response_bytes=2048)) as judge:
        with pytest.raises(JudgeError, match=r"4,002 bytes, over max_response_bytes \(2,048\)"):
            await ask(judge)


# --- usage sanity ----------------------------------------------------------------------------


@respx.mock(base_url=BASE)
async def test_negative_and_absurd_token_counts_count_zero_with_one_warning(respx_mock, caplog):
    usage = {"prompt_tokens": -5000, "completion_tokens": 10**30, "prompt_tokens_details": {"cached_tokens": 10}}
    respx_mock.post("/chat/completions").mock(return_value=reply({"score": 5}, usage=usage))
    prices = {"m": Price(prompt=1.0, completion=2.0)}
    with caplog.at_level(logging.WARNING, logger="reflection.judge"):
        async with Judge(config(prices=prices)) as judge:
            first = await ask(judge)
            await ask(judge)
    u = first.usage
    assert (u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.cost_usd) == (0, 0, 0, 0.0)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("-5000 prompt_tokens" in m for m in messages) == 1
    assert sum("completion_tokens, outside" in m for m in messages) == 1


@respx.mock(base_url=BASE)
async def test_more_cached_than_prompt_tokens_never_gives_a_negative_cost(respx_mock):
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 5000}}
    respx_mock.post("/chat/completions").mock(return_value=reply({"score": 5}, usage=usage))
    async with Judge(config(prices={"m": Price(prompt=10.0, completion=1.0, cached=1.0)})) as judge:
        answer = await ask(judge)
    assert answer.usage.cached_tokens == 100
    assert answer.usage.cost_usd == pytest.approx((100 * 1.0 + 10 * 1.0) / 1e6)


def test_negative_prices_are_refused():
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        Price(prompt=-1.0)


# --- the API key never leaves through a reply ------------------------------------------------


@respx.mock(base_url=BASE)
async def test_a_judge_echoing_the_api_key_has_it_redacted_from_replies_errors_and_the_cache(respx_mock):
    stored = {}

    class Cache:
        async def get(self, key):
            return None

        async def put(self, key, value):
            stored[key] = value

    def validate_explained(data):
        validate(data)
        return data

    respx_mock.post("/chat/completions").mock(
        side_effect=[
            httpx.Response(500, json={"error": {"message": f"your key {KEY} is over quota"}}),
            reply({"score": 9, "explanation": f"echo {KEY}"}),
            reply({"score": 5, "explanation": f"I saw Bearer {KEY} in my headers"}),
        ]
    )
    async with Judge(config(), cache=Cache()) as judge:
        answer = await judge.ask(MESSAGES, schema=SCHEMA, schema_name="t", validate=validate_explained, cache_key="k")
    assert answer.value["explanation"] == "I saw Bearer [redacted] in my headers"
    assert KEY not in dumps(stored) and stored["k"]["explanation"] == "I saw Bearer [redacted] in my headers"
    # The re-ask quoted the invalid reply back: redacted there too.
    assert KEY not in respx_mock.calls[2].request.content.decode()
    respx_mock.post("/chat/completions").mock(
        return_value=httpx.Response(401, json={"error": {"message": f"key {KEY} revoked"}})
    )
    async with Judge(config()) as judge:
        with pytest.raises(JudgeFatalError) as info:
            await ask(judge)
    assert KEY not in str(info.value) and "key [redacted] revoked" in str(info.value)
