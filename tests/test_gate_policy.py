"""`GatePolicy`: per-tool rules, the judge cascade, deadlines, judge failures, the reply cache, shadow mode."""

import logging
import socket

import pytest

from reflection import Gate, GatePolicy, ReflectionConfig, ToolRule
from reflection.judge import JudgeConfig

TOOLS = [
    {"name": "search_docs", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
    {
        "name": "get_order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    },
    {
        "name": "delete_order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    },
]
HISTORY = [{"role": "user", "content": "What is the status of order A-17? If it is late, delete it."}]
GET = {"name": "get_order", "arguments": {"order_id": "A-17"}}
GET_INVENTED = {"name": "get_order", "arguments": {"order_id": "B-99"}}
DELETE = {"name": "delete_order", "arguments": {"order_id": "A-17"}}
RULES = (ToolRule(match="search_*", checks="skip"), ToolRule(match="delete_*", risk="high"))


def gate(judge_config, **policy):
    return Gate(ReflectionConfig(judge=judge_config), policy=GatePolicy(tools=RULES, **policy))


async def test_a_skip_rule_allows_without_any_check(fake_judge):
    async with gate(fake_judge.config) as g:
        decision = await g.check({"name": "search_docs", "arguments": {"query": 5}}, TOOLS, HISTORY)
    assert decision.action == "allow" and decision.result is None
    assert decision.reason == "tool matched skip rule 'search_*'" and fake_judge.requests == []


async def test_a_static_rule_runs_the_static_checks_only(fake_judge):
    policy = {"tools": (ToolRule(match="get_*", checks="static"),)}
    async with Gate(ReflectionConfig(judge=fake_judge.config), policy=GatePolicy(**policy)) as g:
        allowed = await g.check(GET_INVENTED, TOOLS, HISTORY)
        refused = await g.check({"name": "get_order", "arguments": {}}, TOOLS, HISTORY)
    assert allowed.action == "allow" and fake_judge.requests == []
    assert allowed.result.judge_skipped == "tool matched static rule 'get_*': static checks only"
    assert refused.action == "reflect" and refused.reason == "static checks failed: missing_required_parameter"


async def test_the_cascade_skips_the_judge_for_a_grounded_low_risk_call(fake_judge):
    async with gate(fake_judge.config, judge_when="ungrounded") as g:
        decision = await g.check(GET, TOOLS, HISTORY)
    assert decision.action == "allow" and fake_judge.requests == []
    assert decision.result.judge_skipped.startswith("cascade: low-risk tool")


async def test_the_cascade_asks_the_judge_when_a_value_is_not_grounded(fake_judge):
    fake_judge.script("general_hallucination_check", score=1, explanation="B-99 appears nowhere.")
    async with gate(fake_judge.config, judge_when="ungrounded") as g:
        decision = await g.check(GET_INVENTED, TOOLS, HISTORY)
    assert len(fake_judge.requests) == 1 and decision.action == "reflect"


async def test_the_cascade_always_asks_the_judge_about_a_high_risk_tool(fake_judge):
    async with gate(fake_judge.config, judge_when="ungrounded") as g:
        decision = await g.check(DELETE, TOOLS, HISTORY)
    assert len(fake_judge.requests) == 1 and decision.action == "allow"


@pytest.mark.parametrize(
    ("call", "action", "reason"),
    [
        (GET, "allow", "fail-open for low-risk tool"),
        (DELETE, "deny", "fail-closed for high-risk tool"),
    ],
)
async def test_a_failing_judge_fails_open_for_low_risk_and_closed_for_high_risk(fake_judge, call, action, reason):
    fake_judge.fail(500, times=10)
    async with gate(fake_judge.config) as g:
        decision = await g.check(call, TOOLS, HISTORY)
    assert decision.action == action
    assert decision.reason.startswith("judge failed (HTTP 500 from the judge endpoint") and decision.reason.endswith(
        reason
    )
    assert decision.result.overall_valid is None


async def test_the_judge_failure_policy_is_configurable_per_tier(fake_judge):
    fake_judge.fail(500, times=10)
    async with gate(fake_judge.config, on_judge_failure={"low": "escalate", "high": "allow"}) as g:
        low, high = await g.check(GET, TOOLS, HISTORY), await g.check(DELETE, TOOLS, HISTORY)
    assert (low.action, high.action) == ("escalate", "allow")
    assert "could not be checked: HTTP 500" in low.feedback and high.feedback is None


async def test_an_uncertain_judge_falls_back_to_the_failure_policy(fake_judge):
    fake_judge.script("general_hallucination_check", score=5, confidence=0.2)
    config = ReflectionConfig(judge=fake_judge.config, uncertain_below=0.5)
    async with Gate(config, policy=GatePolicy(tools=RULES)) as g:
        decision = await g.check(DELETE, TOOLS, HISTORY)
    assert decision.action == "deny"
    assert decision.reason == "judge uncertain on general_hallucination_check; fail-closed for high-risk tool"


async def test_a_rejected_api_key_is_surfaced_in_the_reason_and_logged_once(fake_judge, caplog):
    fake_judge.fail(401, times=10)
    caplog.set_level(logging.ERROR, logger="reflection.gate")
    async with gate(fake_judge.config) as g:
        decisions = [await g.check(GET, TOOLS, HISTORY) for _ in range(3)]
        decisions.append(g.check_sync(GET, TOOLS, HISTORY))  # the blocking path shares the once
    assert {d.action for d in decisions} == {"allow"}  # the low-risk tier fails open, but not silently
    assert all(d.reason.startswith("judge authentication failed (") and "HTTP 401" in d.reason for d in decisions)
    assert all(d.reason.endswith("check the judge API key; fail-open for low-risk tool") for d in decisions)
    logged = [r for r in caplog.records if r.name == "reflection.gate"]
    assert len(logged) == 1 and "HTTP 401" in logged[0].getMessage() and "fake-key" not in logged[0].getMessage()


@pytest.mark.parametrize(("call", "action"), [(GET, "allow"), (DELETE, "deny")])
async def test_a_judge_that_never_answers_yields_the_policy_decision_at_the_deadline(call, action):
    # A real listening socket that accepts connections and never replies.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        config = JudgeConfig(base_url=f"http://127.0.0.1:{silent.getsockname()[1]}/v1", model="m", timeout=30)
        async with gate(config, deadline_ms=150) as g:
            decision = await g.check(call, TOOLS, HISTORY)
    assert decision.action == action
    assert decision.reason.startswith("judge did not answer within the 150 ms deadline")
    assert {c.status for c in decision.result.semantic.values()} == {"error"}


async def test_identical_requests_are_answered_from_the_in_memory_cache(fake_judge):
    async with gate(fake_judge.config) as g:
        first = await g.check(GET, TOOLS, HISTORY)
        second = await g.check(GET, TOOLS, HISTORY)
        assert len(fake_judge.requests) == 1
        assert first.result.semantic == second.result.semantic and second.result.usage.requests == 0
        assert g.judge.cache.hits == 1


async def test_the_cache_is_bounded_and_can_be_turned_off(fake_judge):
    calls = [{"name": "get_order", "arguments": {"order_id": f"A-{i}"}} for i in range(3)]
    async with gate(fake_judge.config, cache_size=2) as g:
        for call in [*calls, calls[0]]:
            await g.check(call, TOOLS, HISTORY)
        assert len(g.judge.cache) == 2 and len(fake_judge.requests) == 4  # A-0 was evicted by A-2
    async with gate(fake_judge.config, cache_size=0) as g:
        assert g.judge.cache is None


async def test_shadow_mode_allows_everything_and_records_what_it_would_have_done(fake_judge):
    async with gate(fake_judge.config, shadow=True) as g:
        fixable = await g.check({"name": "get_order", "arguments": {"order_id": "A-17", "note": 1}}, TOOLS, HISTORY)
        fake_judge.script("general_hallucination_check", score=1, explanation="B-99 appears nowhere.")
        invalid = await g.check(GET_INVENTED, TOOLS, HISTORY)
    assert (invalid.action, invalid.shadow_action) == ("allow", "reflect")
    assert invalid.call == GET_INVENTED and invalid.feedback is None
    assert invalid.reason == "shadow mode, would reflect: judge checks failed: general_hallucination_check"
    assert invalid.result.feedback() is not None
    # The correction would remove `note`: only ever suggested, so the gate would reflect.
    assert (fixable.action, fixable.shadow_action) == ("allow", "reflect")
    assert fixable.call == {"name": "get_order", "arguments": {"order_id": "A-17", "note": 1}}


@pytest.mark.parametrize(("call", "action"), [(GET, "allow"), (DELETE, "deny")])
async def test_a_judge_endpoint_that_refuses_connections_gives_the_failure_policy(call, action, caplog):
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    config = JudgeConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m")
    async with gate(config) as g:
        decision = await g.check(call, TOOLS, HISTORY)
        again = await g.check(call, TOOLS, HISTORY)
    assert decision.action == again.action == action
    assert (
        decision.reason.startswith("judge failed (judge http://127.0.0.1") and "connection refused" in decision.reason
    )
    assert len([r for r in caplog.records if r.name == "reflection.gate"]) == 1
