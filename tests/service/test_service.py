"""`reflection serve` as a real process on 127.0.0.1: routes, auth, limits, readiness, metrics, logs, drain."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from _service_support import HISTORY, TOOLS, ServiceProcess, wait_in_flight  # noqa: E402

from reflection.cli import app  # noqa: E402
from reflection.testing.upstream import StandInModel  # noqa: E402

pytestmark = pytest.mark.slow  # processes, servers or a browser: `pytest -m "not slow"` leaves them out

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "calls.jsonl"
KEYS = ["test-key-one", "test-key-two"]
AUTH = {"Authorization": f"Bearer {KEYS[0]}"}
MAX_BODY = 64 * 1024
MAX_IN_FLIGHT = 3
DEADLINE = 3.0
SCRIPT = {
    "slow": [{"content": "late", "delay": 1.5}],
    "too-slow": [{"content": "too late", "delay": DEADLINE + 2}],
}


@pytest.fixture(scope="module")
def upstream():
    with StandInModel(SCRIPT, idle_timeout=120) as server:
        yield server


@pytest.fixture(scope="module")
def service(tmp_path_factory, upstream):
    config = {
        "service": {
            "api_keys": KEYS,
            "max_body_bytes": MAX_BODY,
            "max_in_flight": MAX_IN_FLIGHT,
            "max_in_flight_per_key": MAX_IN_FLIGHT,
            "deadline_seconds": DEADLINE,
        },
        "upstream": {"base_url": upstream.base_url},
    }
    server = ServiceProcess(tmp_path_factory.mktemp("service"), config).start()
    yield server
    server.stop()


@pytest.fixture()
def client(service):
    with httpx.Client(base_url=service.url, headers=AUTH, timeout=10) as c:
        yield c


def _row(call, **extra):
    return {"id": "r1", "call": call, "tools": TOOLS, "history": HISTORY, **extra}


# --- routes -----------------------------------------------------------------------------------


def test_reflect_returns_exactly_the_rows_reflection_check_writes(client, tmp_path):
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["check", str(EXAMPLES), "-o", str(out)])
    assert result.exit_code == 0, result.output
    expected = {row["id"]: row for row in map(json.loads, out.read_text().splitlines())}
    compared = 0
    for line in EXAMPLES.read_text().splitlines():
        response = client.post("/v1/reflect", content=line)
        try:
            rid = json.loads(line)["id"]
        except ValueError:
            assert response.status_code == 400  # the example's broken line
            continue
        want = expected[rid]
        if "error" in want:
            assert response.status_code == 422 and response.json()["detail"] == want["error"]
            continue
        assert response.status_code == 200, response.text
        assert {k: v for k, v in response.json().items() if k != "latency_ms"} == {
            k: v for k, v in want.items() if k != "latency_ms"
        }
        compared += 1
    assert compared >= 10


def test_check_runs_the_static_stage_only(client):
    response = client.post("/v1/check", json=_row({"name": "get_weather", "arguments": {"city": "Paris", "days": "2"}}))
    row = response.json()
    assert response.status_code == 200
    assert row["overall_valid"] is False
    assert row["static_incorrect_parameter_type"] == 0.0 and row["static_non_existent_function"] == 1.0
    assert row["judge_skipped"] == "static stage only (/v1/check)"
    assert row["results"][0]["grounding"] == []
    assert row["results"][0]["static"]["correction"]["arguments"] == {"city": "Paris", "days": 2}


def test_check_answers_one_result_per_parallel_call(client):
    calls = [
        {"name": "get_weather", "arguments": {"city": "Paris"}},
        {"name": "get_wheather", "arguments": {"city": "Oslo"}},
    ]
    row = client.post("/v1/check", json={"id": "p", "tool_calls": calls, "tools": TOOLS}).json()
    assert [r["overall_valid"] for r in row["results"]] == [True, False]
    assert row["overall_valid"] is False


def test_gate_decides_modify_with_the_correction_in_the_callers_shape(client):
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": "2"}'},
    }
    response = client.post("/v1/gate", json=_row(call))
    decision = response.json()
    assert response.status_code == 200
    assert decision["action"] == "modify" and response.headers["x-reflection-actions"] == "modify"
    assert decision["call"]["id"] == "call_1"
    assert json.loads(decision["call"]["function"]["arguments"]) == {"city": "Paris", "days": 2}
    assert decision["result"]["static"]["valid"] is False


def test_gate_reflects_a_hallucinated_tool_with_feedback(client):
    decision = client.post(
        "/v1/gate", json=_row({"name": "get_forecast_for_city", "arguments": {"city": "Paris"}})
    ).json()
    assert decision["action"] == "reflect"
    assert "get_forecast_for_city" in decision["feedback"] and "non_existent_function" in decision["feedback"]


def test_gate_answers_one_decision_per_parallel_call(client):
    calls = [
        {"name": "get_weather", "arguments": {"city": "Paris"}},
        {"name": "get_weather", "arguments": {"town": "Oslo"}},
    ]
    body = client.post("/v1/gate", json={"id": "p", "tool_calls": calls, "tools": TOOLS}).json()
    assert body["id"] == "p"
    assert [d["action"] for d in body["decisions"]] == ["allow", "reflect"]


# LiteLLM's documented Generic Guardrail API request (docs: adding_provider/generic_guardrail_api).
LITELLM_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
        },
    }
]
LITELLM_REQUEST = {
    "texts": ["extracted text from the request"],
    "images": [],
    "tools": LITELLM_TOOLS,
    "tool_calls": [
        {
            "id": "call_abc123",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"location": "San Francisco"}'},
        }
    ],
    "structured_messages": [
        {"role": "system", "content": "You are a helpful assistant"},
        {"role": "user", "content": "Hello"},
    ],
    "request_data": {
        "user_api_key_hash": "hash of the litellm virtual key used",
        "user_api_key_alias": "alias",
        "user_api_key_team_id": "team",
    },
    "input_type": "request",
    "litellm_call_id": "unique_call_id",
    "litellm_trace_id": "trace_id",
    "additional_provider_specific_params": {},
}


def test_litellm_guardrail_allows_the_documented_example(client):
    response = client.post("/beta/litellm_basic_guardrail_api", json=LITELLM_REQUEST)
    answer = response.json()
    assert response.status_code == 200
    assert answer["action"] == "NONE"
    assert answer["reflection"]["actions"] == ["allow"]


def test_litellm_guardrail_blocks_a_bad_call_with_the_feedback(client):
    bad = {
        **LITELLM_REQUEST,
        "tool_calls": [
            {
                "id": "call_abc123",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    answer = client.post("/beta/litellm_basic_guardrail_api", json=bad).json()
    assert answer["action"] == "BLOCKED"
    assert "city" in answer["blocked_reason"] and "non_existent_parameter" in answer["blocked_reason"]
    # The correction removes `city`: a suggestion for the model, never applied.
    assert 'Suggested call (passes the static checks): "get_weather" {}' in answer["blocked_reason"]


def test_litellm_guardrail_takes_tools_from_the_config_params_for_responses(client):
    response_type = {
        "texts": [],
        "input_type": "response",
        "request_data": {},
        "tool_calls": LITELLM_REQUEST["tool_calls"],
        "additional_provider_specific_params": {"tools": LITELLM_TOOLS},
    }
    assert client.post("/beta/litellm_basic_guardrail_api", json=response_type).json()["action"] == "NONE"
    without = {**response_type, "additional_provider_specific_params": {}}
    answer = client.post("/beta/litellm_basic_guardrail_api", json=without).json()
    assert answer["action"] == "BLOCKED" and "additional_provider_specific_params.tools" in answer["blocked_reason"]


def test_litellm_guardrail_passes_requests_without_tool_calls(client):
    answer = client.post("/beta/litellm_basic_guardrail_api", json={"texts": ["hello"], "input_type": "request"}).json()
    assert answer["action"] == "NONE"


# --- bad input --------------------------------------------------------------------------------


def test_a_body_that_is_not_json_gets_400_with_the_parser_message(client):
    response = client.post("/v1/reflect", content=b'{"id": "x", "call": ')
    assert response.status_code == 400
    assert response.json()["detail"].startswith("the body is not valid JSON")


def test_a_row_without_a_call_gets_422_saying_what_to_add(client):
    response = client.post("/v1/gate", json={"id": "x", "tools": TOOLS})
    assert response.status_code == 422
    assert 'add the proposed call under "call"' in response.json()["detail"]


def test_a_body_that_is_not_an_object_gets_422(client):
    response = client.post("/v1/check", json=[1, 2])
    assert response.status_code == 422
    assert "expected a JSON object" in response.json()["detail"]


def test_nan_is_rejected_as_not_json(client):
    response = client.post("/v1/check", content=b'{"call": {"name": "get_weather", "arguments": {"days": NaN}}}')
    assert response.status_code == 400


# --- auth ---------------------------------------------------------------------------------------


def test_requests_without_a_valid_key_get_401(service):
    row = _row({"name": "get_weather", "arguments": {"city": "Paris"}})
    missing = httpx.post(service.url + "/v1/check", json=row)
    wrong = httpx.post(service.url + "/v1/check", json=row, headers={"Authorization": "Bearer test-key-on"})
    basic = httpx.post(service.url + "/v1/check", json=row, headers={"Authorization": f"Basic {KEYS[0]}"})
    assert [r.status_code for r in (missing, wrong, basic)] == [401, 401, 401]
    assert missing.headers["www-authenticate"] == "Bearer"
    assert "missing or invalid API key" in missing.json()["detail"]


def test_every_configured_key_works_in_either_header(service):
    row = _row({"name": "get_weather", "arguments": {"city": "Paris"}})
    for headers in ({"Authorization": f"Bearer {KEYS[1]}"}, {"X-Reflection-Api-Key": KEYS[0]}):
        assert httpx.post(service.url + "/v1/check", json=row, headers=headers).status_code == 200


def test_probes_and_metrics_need_no_key(service):
    assert httpx.get(service.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(service.url + "/metrics").status_code == 200


# --- limits -------------------------------------------------------------------------------------


def test_a_body_over_the_limit_gets_413(client):
    big = {"id": "big", "call": {"name": "get_weather", "arguments": {"city": "x" * MAX_BODY}}, "tools": TOOLS}
    response = client.post("/v1/check", json=big)
    assert response.status_code == 413
    assert "max_body_bytes" in response.json()["detail"]


@pytest.mark.parametrize("path", ["/v1/check", "/beta/litellm_basic_guardrail_api"])
def test_a_chunked_body_over_the_limit_gets_413(client, path):
    def chunks():
        yield b'{"id": "big", "call": {"name": "get_weather", "arguments": {"city": "'
        for _ in range(MAX_BODY // 1024 + 1):
            yield b"x" * 1024
        yield b'"}}}'

    response = client.post(path, content=chunks())
    assert response.status_code == 413
    assert "max_body_bytes" in response.json()["detail"]


def test_requests_over_the_in_flight_limit_get_503_with_retry_after(service):
    slow = {"model": "slow", "messages": HISTORY}
    results: list[int] = []

    def call() -> None:
        results.append(
            httpx.post(service.url + "/v1/chat/completions", json=slow, headers=AUTH, timeout=10).status_code
        )

    threads = [threading.Thread(target=call) for _ in range(MAX_IN_FLIGHT)]
    for thread in threads:
        thread.start()
    wait_in_flight(service.url, MAX_IN_FLIGHT)
    other_key = {"Authorization": f"Bearer {KEYS[1]}"}
    refused = httpx.post(
        service.url + "/v1/check", json=_row({"name": "get_weather", "arguments": {}}), headers=other_key
    )
    for thread in threads:
        thread.join()
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    assert "service.max_in_flight)" in refused.json()["detail"]
    assert results == [200] * MAX_IN_FLIGHT


def test_a_request_past_its_deadline_gets_504(client):
    response = client.post("/v1/chat/completions", json={"model": "too-slow", "messages": HISTORY})
    assert response.status_code == 504
    assert "deadline" in response.json()["detail"]


# --- readiness, metrics, logs -------------------------------------------------------------------


def test_ready_when_the_upstream_answers(service):
    response = httpx.get(service.url + "/readyz")
    assert response.status_code == 200
    checks = response.json()["checks"]
    assert checks["config"] == "loaded" and checks["upstream"].startswith("reachable")
    assert checks["judge"].startswith("not configured")


def test_metrics_count_requests_decisions_and_latency(client):
    client.post("/v1/gate", json=_row({"name": "get_weather", "arguments": {"city": "Paris", "days": "3"}}))
    client.post("/v1/check", json=_row({"name": "get_weather", "arguments": {"city": "Paris"}}))
    text = httpx.get(client.base_url.join("/metrics")).text
    assert 'reflection_http_requests_total{route="/v1/gate",status="200"}' in text
    assert 'reflection_decisions_total{action="modify",shadow_action=""}' in text
    assert 'reflection_http_request_duration_seconds_bucket{le="0.005",route="/v1/check"}' in text
    assert "reflection_judge_requests_total" in text and "reflection_judge_cost_usd_total" in text


def test_one_json_log_line_per_request_with_its_id_and_no_key_or_body(client, service):
    secret_value = "do-not-log-this-argument-value"
    response = client.post(
        "/v1/check",
        json=_row({"name": "get_weather", "arguments": {"city": secret_value}}),
        headers={"X-Request-Id": "test-request-42"},
    )
    assert response.headers["x-request-id"] == "test-request-42"
    deadline = time.monotonic() + 5
    while "test-request-42" not in service.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = [json.loads(line) for line in service.log().splitlines() if "test-request-42" in line]
    assert len(lines) == 1
    assert lines[0] | {"ts": None, "duration_ms": None} == {
        "ts": None,
        "duration_ms": None,
        "level": "info",
        "logger": "reflection.service",
        "msg": "request",
        "request_id": "test-request-42",
        "method": "POST",
        "route": "/v1/check",
        "status": 200,
        "client": "127.0.0.1",
    }
    log = service.log()
    assert secret_value not in log
    assert not any(key in log for key in KEYS)


def test_a_request_without_an_id_gets_a_fresh_uuid4(client):
    ids = [
        client.post("/v1/check", json=_row({"name": "get_weather", "arguments": {}})).headers["x-request-id"]
        for _ in range(3)
    ]
    assert len(set(ids)) == 3
    for request_id in ids:
        assert uuid.UUID(hex=request_id).hex == request_id and uuid.UUID(hex=request_id).version == 4


def test_openapi_describes_every_route(service):
    paths = httpx.get(service.url + "/openapi.json").json()["paths"]
    for route in (
        "/v1/reflect",
        "/v1/check",
        "/v1/gate",
        "/v1/chat/completions",
        "/beta/litellm_basic_guardrail_api",
        "/healthz",
        "/readyz",
        "/metrics",
    ):
        assert route in paths
    assert "call" in json.dumps(paths["/v1/reflect"]["post"]["requestBody"])


# --- other processes ------------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_not_ready_and_502_when_the_judge_and_upstream_are_unreachable(tmp_path):
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    server = ServiceProcess(
        tmp_path, {"judge": {"base_url": dead, "model": "m"}, "upstream": {"base_url": dead}}
    ).start()
    try:
        response = httpx.get(server.url + "/readyz")
        assert response.status_code == 503
        assert response.json()["checks"]["judge"].startswith("unreachable")
        gateway = httpx.post(server.url + "/v1/chat/completions", json={"model": "m", "messages": HISTORY})
        assert gateway.status_code == 502
        assert "could not be reached" in gateway.json()["detail"]
    finally:
        server.stop()


def test_serve_refuses_to_listen_beyond_loopback_without_keys(tmp_path):
    command = [
        sys.executable,
        "-c",
        "from reflection.cli import app; app()",
        "serve",
        "--host",
        "0.0.0.0",
        "--port",
        "0",
    ]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=30,
        env={k: v for k, v in __import__("os").environ.items() if not k.startswith("REFLECTION_")},
    )
    assert done.returncode == 2
    assert "refusing --host 0.0.0.0" in done.stderr and "--insecure-no-auth" in done.stderr


def test_sigterm_drains_the_requests_in_flight(tmp_path, upstream):
    server = ServiceProcess(tmp_path, {"upstream": {"base_url": upstream.base_url}}).start()
    results: list[httpx.Response] = []
    thread = threading.Thread(
        target=lambda: results.append(
            httpx.post(server.url + "/v1/chat/completions", json={"model": "slow", "messages": HISTORY}, timeout=10)
        )
    )
    thread.start()
    wait_in_flight(server.url, 1)
    server.terminate()
    thread.join(10)
    # uvicorn re-raises the SIGTERM it handled once drained: the exit status says "terminated".
    assert server.process is not None and server.process.wait(10) in (0, -signal.SIGTERM)
    assert results and results[0].status_code == 200
    assert results[0].json()["choices"][0]["message"]["content"] == "late"
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/healthz")


def test_several_workers_serve_and_report_metrics_together(tmp_path):
    server = ServiceProcess(tmp_path, {}, "--workers", "2").start()
    try:
        for _ in range(12):
            response = httpx.post(
                server.url + "/v1/check", json=_row({"name": "get_weather", "arguments": {"city": "P"}})
            )
            assert response.status_code == 200
        text = httpx.get(server.url + "/metrics").text
        line = next(
            x
            for x in text.splitlines()
            if x.startswith('reflection_http_requests_total{route="/v1/check",status="200"}')
        )
        assert float(line.split()[-1]) == 12.0
    finally:
        assert server.stop() in (0, -signal.SIGTERM)


def test_with_a_judge_reflect_runs_the_semantic_checks_and_metrics_count_its_requests(tmp_path):
    from reflection.testing.server import StandInJudge

    with StandInJudge(idle_timeout=60) as judge:
        server = ServiceProcess(tmp_path, {"judge": {"base_url": judge.base_url, "model": "stand-in"}}).start()
        try:
            row = httpx.post(
                server.url + "/v1/reflect",
                timeout=30,
                json=_row({"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}),
            ).json()
            assert row["overall_valid"] is True and row["semantic_general_hallucination_check"] == 1.0
            assert row["usage"]["requests"] == 1
            assert httpx.get(server.url + "/readyz").json()["checks"]["judge"].startswith("reachable")
            text = httpx.get(server.url + "/metrics").text
            assert "reflection_judge_requests_total 1.0" in text
            assert 'reflection_judge_tokens_total{kind="prompt"}' in text
        finally:
            server.stop()
