"""Tenants (`service.tenants`): one `reflection serve` process serving teams with their own API
keys, gate policy, judge and upstream, driven with httpx and the official `openai` client.

The deployment under test: the top-level settings (the tenant `default`, keys in
`service.api_keys`) have no judge and the main stand-in model; `ops` trusts its `delete_*` tools
(skip rule) and has its own stand-in judge; `support` treats `delete_*` as high risk, denies what
fails, has its own stand-in judge and its own stand-in model; `nogateway` has no upstream.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
import yaml

pytestmark = pytest.mark.slow  # real processes and servers

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

from _service_support import HISTORY, TOOLS, ServiceProcess, wait_in_flight  # noqa: E402

from reflection.config import ConfigError, ReflectionConfig, load_config  # noqa: E402
from reflection.testing.server import StandInJudge  # noqa: E402
from reflection.testing.upstream import StandInModel  # noqa: E402

DEFAULT_KEY = "default-key-0d6f2a91c4"
OPS_KEY = "ops-key-5b8e1f07aa"
SUPPORT_KEY = "support-key-93c4d2e6bb"
NOGATEWAY_KEY = "nogateway-key-1a2b3c4d5e"
KEYS = (DEFAULT_KEY, OPS_KEY, SUPPORT_KEY, NOGATEWAY_KEY)

DELETE_TOOLS = [
    *TOOLS,
    {
        "type": "function",
        "function": {
            "name": "delete_record",
            "description": "Delete a customer record.",
            "parameters": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
        },
    },
]
DELETE_HISTORY = [{"role": "user", "content": "Please clean up the stale customer records."}]
DELETE_CALL = {"name": "delete_record", "arguments": {"id": "r-77"}}  # r-77 appears nowhere: the judge flags it
SCRIPT = {
    "deletes": [{"tool_calls": [DELETE_CALL]}],
    "slow": [{"content": "late", "delay": 3}],
}


@pytest.fixture(scope="module")
def judges():
    with StandInJudge(idle_timeout=120) as ops, StandInJudge(idle_timeout=120) as support:
        yield {"ops": ops, "support": support}


@pytest.fixture(scope="module")
def upstreams():
    with StandInModel(SCRIPT, idle_timeout=120) as main, StandInModel(SCRIPT, idle_timeout=120) as support:
        yield {"main": main, "support": support}


@pytest.fixture(scope="module")
def service(tmp_path_factory, judges, upstreams):
    config = {
        "upstream": {"base_url": upstreams["main"].base_url},
        "service": {
            "api_keys": [DEFAULT_KEY],
            "max_in_flight_per_key": 1,
            "tenants": {
                "ops": {
                    "api_keys": [OPS_KEY],
                    "judge": {"base_url": judges["ops"].base_url, "model": "judge-ops"},
                    "gate": {"tools": [{"match": "delete_*", "checks": "skip"}]},
                },
                "support": {
                    "api_keys": [SUPPORT_KEY],
                    "judge": {"base_url": judges["support"].base_url, "model": "judge-support"},
                    "gate": {"on_invalid": "deny", "tools": [{"match": "delete_*", "risk": "high"}]},
                    "upstream": {"base_url": upstreams["support"].base_url, "max_reflect_rounds": 0},
                },
                "nogateway": {"api_keys": [NOGATEWAY_KEY], "upstream": None},
            },
        },
    }
    server = ServiceProcess(tmp_path_factory.mktemp("tenants"), config).start()
    yield server
    server.stop()


def _gate(
    service, key: str, call: dict, *, tools=DELETE_TOOLS, history=DELETE_HISTORY, **headers: str
) -> httpx.Response:
    return httpx.post(
        service.url + "/v1/gate",
        json={"id": "r1", "call": call, "tools": tools, "history": history},
        headers={"authorization": f"Bearer {key}", **headers},
        timeout=30,
    )


def _openai(service, key: str):
    # The model's key rides in Authorization (passed upstream); the tenant's key in X-Reflection-Api-Key.
    return openai.OpenAI(
        base_url=service.url + "/v1",
        api_key="sk-model-key",
        max_retries=0,
        default_headers={"X-Reflection-Api-Key": key},
    )


def _log_lines(service, request_id: str) -> list[dict]:
    deadline = time.monotonic() + 5
    while request_id not in service.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    return [json.loads(line) for line in service.log().splitlines() if request_id in line]


# --- policies -------------------------------------------------------------------------------------


def test_the_same_call_is_allowed_for_one_tenant_and_denied_for_the_other(service):
    ops = _gate(service, OPS_KEY, DELETE_CALL)
    support = _gate(service, SUPPORT_KEY, DELETE_CALL)
    assert ops.status_code == support.status_code == 200
    assert ops.json()["action"] == "allow"
    assert ops.json()["reason"] == "tool matched skip rule 'delete_*'"
    assert support.json()["action"] == "deny"
    assert "general_hallucination_check" in support.json()["reason"]


def test_keys_in_service_api_keys_get_the_top_level_settings(service):
    decision = _gate(service, DEFAULT_KEY, DELETE_CALL).json()
    assert decision["action"] == "allow"  # no skip rule, no judge: the static checks pass
    assert decision["result"]["judge_skipped"] is not None


def test_an_unknown_key_is_refused(service):
    response = _gate(service, "not-a-configured-key", DELETE_CALL)
    assert response.status_code == 401


def test_through_the_gateway_each_tenant_gets_its_decision_and_its_own_upstream(service, upstreams):
    main_before, support_before = len(upstreams["main"].requests), len(upstreams["support"].requests)
    with _openai(service, OPS_KEY) as ops, _openai(service, SUPPORT_KEY) as support:
        allowed = ops.chat.completions.with_raw_response.create(
            model="deletes", messages=DELETE_HISTORY, tools=DELETE_TOOLS
        )
        denied = support.chat.completions.with_raw_response.create(
            model="deletes", messages=DELETE_HISTORY, tools=DELETE_TOOLS
        )
    assert allowed.headers["x-reflection-actions"] == "allow"
    calls = allowed.parse().choices[0].message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("delete_record", {"id": "r-77"})]
    assert denied.headers["x-reflection-actions"] == "deny"
    assert not denied.parse().choices[0].message.tool_calls
    # Each tenant's request went to its own upstream, once (support re-asks 0 times), with the
    # model's key and never the service's.
    assert len(upstreams["main"].requests) == main_before + 1
    assert len(upstreams["support"].requests) == support_before + 1
    for model, key in (("main", OPS_KEY), ("support", SUPPORT_KEY)):
        headers = upstreams[model].headers[-1]
        assert headers["authorization"] == "Bearer sk-model-key"
        assert key not in json.dumps(headers)


def test_a_streamed_reply_is_gated_with_the_tenants_policy(service):
    with _openai(service, SUPPORT_KEY) as support, _openai(service, OPS_KEY) as ops:
        denied = list(
            support.chat.completions.create(model="deletes", messages=DELETE_HISTORY, tools=DELETE_TOOLS, stream=True)
        )
        allowed = list(
            ops.chat.completions.create(model="deletes", messages=DELETE_HISTORY, tools=DELETE_TOOLS, stream=True)
        )
    assert not any(choice.delta.tool_calls for chunk in denied for choice in chunk.choices)
    names = [
        call.function.name
        for chunk in allowed
        for choice in chunk.choices
        for call in choice.delta.tool_calls or ()
        if call.function and call.function.name
    ]
    assert names == ["delete_record"]


def test_the_litellm_guardrail_uses_the_tenant_of_its_x_api_key(service):
    body = {
        "input_type": "request",
        "tools": DELETE_TOOLS,
        "structured_messages": DELETE_HISTORY,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "delete_record", "arguments": json.dumps(DELETE_CALL["arguments"])},
            }
        ],
    }
    answers = {
        name: httpx.post(
            service.url + "/beta/litellm_basic_guardrail_api", json=body, headers={"x-api-key": key}, timeout=30
        ).json()
        for name, key in (("ops", OPS_KEY), ("support", SUPPORT_KEY))
    }
    assert answers["ops"]["action"] == "NONE"
    assert answers["support"]["action"] == "BLOCKED" and answers["support"]["reflection"]["actions"] == ["deny"]


def test_a_tenant_without_an_upstream_has_no_gateway(service):
    with _openai(service, NOGATEWAY_KEY) as client, pytest.raises(openai.NotFoundError) as refused:
        client.chat.completions.create(model="deletes", messages=DELETE_HISTORY, tools=DELETE_TOOLS)
    assert "no upstream configured" in refused.value.response.json()["detail"]


# --- judges ---------------------------------------------------------------------------------------


def test_each_tenants_judge_receives_only_its_tenants_requests(service, judges):
    def headers(key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    row = {
        "call": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}},
        "tools": TOOLS,
        "history": HISTORY,
    }
    before = {name: judge.requests for name, judge in judges.items()}
    ops = httpx.post(service.url + "/v1/reflect", json={"id": "a", **row}, headers=headers(OPS_KEY), timeout=30)
    assert ops.status_code == 200 and ops.json()["usage"]["requests"] == 1
    assert {name: judge.requests - before[name] for name, judge in judges.items()} == {"ops": 1, "support": 0}
    support = httpx.post(service.url + "/v1/reflect", json={"id": "b", **row}, headers=headers(SUPPORT_KEY), timeout=30)
    assert support.status_code == 200 and support.json()["usage"]["requests"] == 1  # not ops's cached reply
    assert {name: judge.requests - before[name] for name, judge in judges.items()} == {"ops": 1, "support": 1}
    default = httpx.post(service.url + "/v1/reflect", json={"id": "c", **row}, headers=headers(DEFAULT_KEY), timeout=30)
    assert default.status_code == 200 and default.json()["usage"]["requests"] == 0  # no top-level judge
    assert {name: judge.requests - before[name] for name, judge in judges.items()} == {"ops": 1, "support": 1}


def test_tenants_with_the_same_judge_share_it_but_never_a_cached_reply(tmp_path):
    with StandInJudge(idle_timeout=60) as judge:
        same = {"base_url": judge.base_url, "model": "shared"}
        config = {
            "judge": same,
            "service": {
                "api_keys": [DEFAULT_KEY],
                "tenants": {
                    "ops": {"api_keys": [OPS_KEY], "judge": same},
                    "support": {"api_keys": [SUPPORT_KEY], "judge": same},
                },
            },
        }
        server = ServiceProcess(tmp_path, config).start()
        try:
            row = {
                "id": "r",
                "call": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}},
                "tools": TOOLS,
                "history": HISTORY,
            }
            asked = []
            for key in (OPS_KEY, SUPPORT_KEY, DEFAULT_KEY, OPS_KEY):
                response = httpx.post(
                    server.url + "/v1/reflect", json=row, headers={"x-reflection-api-key": key}, timeout=30
                )
                assert response.status_code == 200
                asked.append(response.json()["usage"]["requests"])
            # A repeated call is free for the tenant that asked it first, and only for that one.
            assert asked == [1, 1, 1, 0]
            assert judge.requests == 3
        finally:
            assert server.stop() in (0, -signal.SIGTERM)


def test_readiness_probes_each_tenants_judge_and_upstream(service):
    checks = httpx.get(service.url + "/readyz").json()["checks"]
    assert checks["judge"].startswith("not configured")
    assert checks["upstream"].startswith("reachable")
    for name in ("judge[ops]", "judge[support]", "upstream[support]"):
        assert checks[name].startswith("reachable"), checks


# --- limits, metrics, logs ------------------------------------------------------------------------


def test_per_key_in_flight_shares_hold_across_tenants(service):
    results: list[int] = []
    slow = threading.Thread(
        target=lambda: results.append(
            httpx.post(
                service.url + "/v1/chat/completions",
                json={"model": "slow", "messages": HISTORY},
                headers={"x-reflection-api-key": OPS_KEY},
                timeout=30,
            ).status_code
        )
    )
    slow.start()
    try:
        wait_in_flight(service.url, 1)
        refused = _gate(service, OPS_KEY, DELETE_CALL)  # its share: max_in_flight_per_key 1
        served = _gate(service, SUPPORT_KEY, DELETE_CALL)
    finally:
        slow.join(30)
    assert refused.status_code == 503 and "service.max_in_flight_per_key" in refused.json()["detail"]
    assert served.status_code == 200
    assert results == [200]


def test_metrics_carry_the_tenant_and_never_a_key(service):
    _gate(service, OPS_KEY, DELETE_CALL)
    _gate(service, SUPPORT_KEY, DELETE_CALL)
    _gate(service, "not-a-configured-key", DELETE_CALL)
    with _openai(service, SUPPORT_KEY) as support:
        support.chat.completions.create(model="deletes", messages=DELETE_HISTORY, tools=DELETE_TOOLS)
    text = httpx.get(service.url + "/metrics").text
    assert 'reflection_decisions_total{action="allow",shadow_action="",tenant="ops"}' in text
    assert 'reflection_decisions_total{action="deny",shadow_action="",tenant="support"}' in text
    assert 'reflection_http_requests_total{route="/v1/gate",status="200",tenant="ops"}' in text
    assert 'reflection_http_requests_total{route="/v1/gate",status="401",tenant=""}' in text
    assert 'reflection_judge_requests_total{tenant="support"}' in text
    assert 'reflection_upstream_requests_total{status="200",tenant="support"}' in text
    assert not any(key in text for key in KEYS)


def test_log_lines_carry_the_tenant_and_never_a_key(service):
    _gate(service, OPS_KEY, DELETE_CALL, **{"x-request-id": "tenant-log-ops"})
    _gate(service, SUPPORT_KEY, DELETE_CALL, **{"x-request-id": "tenant-log-support"})
    _gate(service, "not-a-configured-key", DELETE_CALL, **{"x-request-id": "tenant-log-unknown"})
    [ops] = _log_lines(service, "tenant-log-ops")
    [support] = _log_lines(service, "tenant-log-support")
    [unknown] = _log_lines(service, "tenant-log-unknown")
    assert (ops["tenant"], ops["actions"]) == ("ops", "allow")
    assert (support["tenant"], support["actions"]) == ("support", "deny")
    assert unknown["status"] == 401 and "tenant" not in unknown
    log = service.log()
    assert not any(key in log for key in KEYS)


# --- configuration --------------------------------------------------------------------------------


def _write(tmp_path, config: dict):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_serve_refuses_a_key_listed_in_two_tenants_without_showing_it(tmp_path):
    secret = "shared-key-7f3a9c2d1e"
    path = _write(
        tmp_path,
        {"service": {"tenants": {"ops": {"api_keys": [secret]}, "support": {"api_keys": ["other-key-1234", secret]}}}},
    )
    done = subprocess.run(
        [sys.executable, "-c", "from reflection.cli import app; app()", "serve", "--config", str(path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "service.tenants.ops.api_keys" in done.stderr and "service.tenants.support.api_keys" in done.stderr
    assert "exactly one tenant" in done.stderr
    assert secret not in done.stderr + done.stdout


@pytest.mark.parametrize(
    ("service_config", "where"),
    [
        (
            {"api_keys": ["k-1"], "tenants": {"ops": {"api_keys": ["k-1"]}}},
            "in both service.api_keys and service.tenants.ops.api_keys",
        ),
        ({"tenants": {"ops": {"api_keys": ["k-1", "k-1"]}}}, "twice in service.tenants.ops.api_keys"),
    ],
)
def test_a_key_listed_twice_is_a_config_error(tmp_path, service_config, where):
    with pytest.raises(ConfigError, match=where) as error:
        load_config(_write(tmp_path, {"service": service_config}))
    assert "k-1" not in str(error.value)


@pytest.mark.parametrize(
    ("tenant", "message"),
    [
        ({"api_keys": []}, "service.tenants.ops.api_keys"),
        ({"api_keys": ["k"], "gate": {"tools": [{"match": "x", "checks": "never"}]}}, "service.tenants.ops.gate"),
        ({"api_keys": ["k"], "gate": {"on_invalid": "shrug"}}, "on_invalid"),
        ({"api_keys": ["k"], "gate": {"default_rsk": "high"}}, "did you mean .default_risk."),
        ({"api_keys": ["k"], "upstream": {"timeout": 5}}, "base_url is required"),
        ({"api_keys": ["k"], "judge": {"modle": "m"}}, "did you mean 'model'"),
    ],
)
def test_a_tenant_that_cannot_be_served_is_a_config_error(tmp_path, tenant, message):
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, {"service": {"tenants": {"ops": tenant}}}))


@pytest.mark.parametrize("name", ["default", "has space", "-dash-first", "x" * 64])
def test_tenant_names_are_plain_and_default_is_reserved(tmp_path, name):
    with pytest.raises(ConfigError, match="tenant name"):
        load_config(_write(tmp_path, {"service": {"tenants": {name: {"api_keys": ["k"]}}}}))


def test_a_tenant_changes_only_what_it_names():
    config = ReflectionConfig(
        judge={"base_url": "http://judge.example/v1", "model": "top"},
        upstream={"base_url": "http://model.example/v1", "max_reflect_rounds": 3},
        gate={
            "default_risk": "high",
            "on_judge_failure": {"low": "deny"},
            "tools": [{"match": "a_*", "checks": "skip"}],
        },
        service={
            "tenants": {
                "ops": {
                    "api_keys": ["k1"],
                    "gate": {"on_judge_failure": {"high": "escalate"}},
                    "upstream": {"timeout": 5},
                },
                "static": {
                    "api_keys": ["k2"],
                    "judge": None,
                    "gate": {"tools": [{"match": "b_*", "checks": "static"}]},
                },
            }
        },
    )
    ops = config.service.tenants["ops"].resolve("ops", config)
    assert ops.gate.on_judge_failure == {
        "low": "deny",
        "high": "escalate",
    }  # merged tier by tier: no surprise fail-open
    assert ops.gate.default_risk == "high" and [r.match for r in ops.gate.tools] == ["a_*"]
    assert (ops.upstream.base_url, ops.upstream.timeout, ops.upstream.max_reflect_rounds) == (
        "http://model.example/v1",
        5,
        3,
    )
    assert ops.judge == config.judge
    static = config.service.tenants["static"].resolve("static", config)
    assert static.judge is None and [r.match for r in static.gate.tools] == ["b_*"]  # rules replace, not add
    assert static.upstream == config.upstream
    assert config.service.key_tenants() == [("k1", "ops"), ("k2", "static")]
