"""The gate owns what it decides: what runs for a decision (`reflection.apply`, one mapping for the
gateway, the MCP proxy, the guardrail route and the hooks), the bounded re-ask rounds
(`reflection.reask`, shape-neutral), and their settings under `gate:` with the `upstream:` keys as
aliases."""

from __future__ import annotations

from typing import Any

import pytest

from reflection import Gate, GatePolicy, ReflectionConfig
from reflection.apply import apply_decision, runs_as_proposed_tool
from reflection.formats import content_calls, count_calls, is_parallel, message_calls, output_calls
from reflection.reask import Budget, Reply, Said, TooManyCalls, report, settle
from reflection.pipeline import check_static

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "required": ["city"],
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    }
]
GOOD = {"id": "a", "name": "get_weather", "arguments": {"city": "Paris"}}
COERCED = {"id": "b", "name": "get_weather", "arguments": {"city": "Paris", "days": "3"}}
RENAMED = {"id": "c", "name": "Get_Weather", "arguments": {"city": "Paris"}}
MISSING = {"id": "d", "name": "get_weather", "arguments": {}}


async def _decide(call: dict[str, Any], **policy: Any) -> Any:
    async with Gate(ReflectionConfig(), policy=GatePolicy(**policy)) as gate:
        return await gate.check(call, TOOLS)


# --- the settings ------------------------------------------------------------------------------


def test_the_reask_settings_live_in_the_gate_policy_with_their_defaults():
    policy = ReflectionConfig().gate
    assert (policy.max_reflect_rounds, policy.reflect_fallback) == (2, "deny")


def test_the_upstream_keys_are_aliases_a_config_that_sets_them_there_behaves_as_before():
    config = ReflectionConfig(
        upstream={"base_url": "http://model/v1", "max_reflect_rounds": 0, "reflect_fallback": "escalate"}
    )
    assert (config.gate.max_reflect_rounds, config.gate.reflect_fallback) == (0, "escalate")
    assert config.upstream.max_reflect_rounds == 0  # still readable where it was set


def test_when_both_are_set_the_gate_key_wins():
    config = ReflectionConfig(
        upstream={"base_url": "http://model/v1", "max_reflect_rounds": 0, "reflect_fallback": "escalate"},
        gate={"max_reflect_rounds": 3},
    )
    assert config.gate.max_reflect_rounds == 3  # gate: wins
    assert config.gate.reflect_fallback == "escalate"  # set only under upstream: taken from there


def test_a_tenants_own_setting_wins_over_the_top_level_in_either_spelling():
    config = ReflectionConfig(
        upstream={"base_url": "http://model/v1"},
        gate={"max_reflect_rounds": 4},
        service={
            "tenants": {
                "old": {"api_keys": ["k1"], "upstream": {"max_reflect_rounds": 0}},
                "both": {"api_keys": ["k2"], "gate": {"max_reflect_rounds": 1}, "upstream": {"max_reflect_rounds": 0}},
                "none": {"api_keys": ["k3"]},
            }
        },
    )
    resolved = {
        name: tenant.resolve(name, config).gate.max_reflect_rounds for name, tenant in config.service.tenants.items()
    }
    assert resolved == {"old": 0, "both": 1, "none": 4}


def test_the_reask_settings_are_validated_under_gate_as_under_upstream():
    with pytest.raises(ValueError, match="max_reflect_rounds"):
        ReflectionConfig(gate={"max_reflect_rounds": 11})
    with pytest.raises(ValueError, match="reflect_fallback"):
        ReflectionConfig(gate={"reflect_fallback": "allow"})


# --- applying a decision -------------------------------------------------------------------------


async def test_allow_runs_the_proposed_call():
    applied = apply_decision(await _decide(GOOD), GOOD)
    assert (applied.runs, applied.call, applied.reask, applied.escalate) == ("proposed", GOOD, False, False)


async def test_modify_runs_the_correction_where_the_caller_can_run_one():
    decision = await _decide(COERCED)
    assert decision.action == "modify"
    applied = apply_decision(decision, COERCED)
    assert applied.runs == "corrected" and applied.call["arguments"]["days"] == 3
    refused = apply_decision(decision, COERCED, corrects=False)  # a guardrail cannot change the call
    assert (refused.runs, refused.call, refused.reask, refused.escalate) == ("nothing", None, False, False)
    assert refused.text == decision.reason  # no feedback for modify: the reason says what was corrected


async def test_a_rename_runs_only_where_the_caller_may_run_another_tool():
    decision = await _decide(RENAMED, apply_renames=True)
    assert decision.action == "modify" and not runs_as_proposed_tool(decision, "Get_Weather")
    assert apply_decision(decision, RENAMED).runs == "corrected"  # the gateway, the MCP proxy: noted in the reply
    assert apply_decision(decision, RENAMED, tool="Get_Weather", renames=False).runs == "nothing"  # a hook


@pytest.mark.parametrize(
    ("on_invalid", "reask", "escalate"), [("reflect", True, False), ("deny", False, False), ("escalate", False, True)]
)
async def test_a_refused_call_runs_nothing(on_invalid, reask, escalate):
    decision = await _decide(MISSING, on_invalid=on_invalid)
    applied = apply_decision(decision, MISSING)
    assert (applied.runs, applied.call, applied.reask, applied.escalate) == ("nothing", None, reask, escalate)
    assert applied.text == decision.feedback


# --- the rounds, shape-neutral ---------------------------------------------------------------------


class PlainShape:
    """Plain `{"id", "name", "arguments"}` calls."""

    def call_id(self, call: Any) -> Any:
        return call.get("id")

    def with_id(self, call: dict[str, Any], call_id: str) -> dict[str, Any]:
        return {**call, "id": call_id}

    def corrected(self, corrected: Any, original: Any) -> Any:
        return {**corrected, "id": original["id"]}

    def identity(self, call: Any) -> bytes:
        return repr((call["name"], sorted(call["arguments"].items()))).encode()


class Model:
    """Answers each re-ask with the next scripted turn, and records what it was shown."""

    def __init__(self, *turns: Said):
        self.turns = list(turns)
        self.asked: list[tuple[list[Any], list[str], int]] = []

    async def __call__(self, said: Said, calls: list[Any], results: list[str], round_: int) -> Reply:
        self.asked.append((calls, results, round_))
        return Reply(self.turns.pop(0), usage={"total_tokens": 1}, id=f"r{round_}")


async def _settle(said: Said, model: Model, budget: Budget, **policy: Any):
    async with Gate(ReflectionConfig(), policy=GatePolicy(**policy)) as gate:

        async def check(calls: list[Any]) -> list[Any]:
            return await gate.check(calls, TOOLS)

        return await settle(said, check, model, PlainShape(), budget)


async def test_one_reask_per_round_for_every_refused_call_together_then_the_fallback():
    policy = GatePolicy(max_reflect_rounds=2, reflect_fallback="escalate")
    model = Model(Said([MISSING, {**MISSING, "id": "e"}]), Said([MISSING]))
    turn = await _settle(
        Said([GOOD, MISSING, {**MISSING, "id": "e"}]),
        model,
        Budget(policy, 8),
        max_reflect_rounds=2,
        reflect_fallback="escalate",
    )
    assert [round_ for _, _, round_ in model.asked] == [1, 2]  # depth: two rounds, one re-ask each
    assert [len(calls) for calls, _, _ in model.asked] == [3, 2]  # width: all calls of the turn together
    assert "was accepted" in model.asked[0][1][0]  # the model sees its whole turn
    assert turn.calls == [GOOD] and turn.rounds == 2
    assert turn.applied == ["allow", "escalate"] and len(turn.escalated) == 1
    assert report([turn])["reask_usage"] == [{"total_tokens": 1}] * 2 and turn.reply_id == "r2"


async def test_the_reasks_of_one_client_request_share_one_budget():
    policy = GatePolicy(max_reflect_rounds=2)
    budget = Budget(policy, 8)
    first = await _settle(Said([MISSING]), Model(Said([MISSING]), Said([MISSING])), budget)
    second = await _settle(Said([MISSING]), Model(), budget)
    assert (first.rounds, second.rounds, budget.left) == (2, 0, 0)
    assert first.applied == ["deny"] and second.applied == ["deny"]  # the fallback


async def test_no_rounds_means_the_fallback_at_once_and_a_turn_too_wide_is_refused_whole():
    turn = await _settle(Said([MISSING]), Model(), Budget(GatePolicy(max_reflect_rounds=0), 8))
    assert (turn.rounds, turn.applied, turn.calls) == (0, ["deny"], [])
    with pytest.raises(TooManyCalls):
        await _settle(Said([GOOD] * 3), Model(), Budget(GatePolicy(), 2))


async def test_an_accepted_call_proposed_again_is_kept_once_and_a_repeated_id_made_unique():
    model = Model(Said([GOOD, {**GOOD, "id": "a", "arguments": {"city": "Rome"}}]))
    turn = await _settle(Said([GOOD, MISSING]), model, Budget(GatePolicy(), 8))
    assert [call["id"] for call in turn.calls] == ["a", "a_1"]  # the repeated GOOD is not added again
    assert turn.calls[1]["arguments"] == {"city": "Rome"}
    assert [(d["round"], d["action"]) for d in turn.decisions] == [
        (0, "allow"),
        (0, "reflect"),
        (1, "allow"),
        (1, "allow"),
    ]


# --- formats: calls in messages ---------------------------------------------------------------------


def test_calls_are_read_from_each_apis_reply_through_formats():
    legacy = {"name": "f", "arguments": "{}"}
    assert message_calls({"tool_calls": [GOOD], "function_call": legacy})[1]["function"] is legacy
    assert message_calls({"content": "hi"}) is None
    with pytest.raises(ValueError):
        message_calls({"tool_calls": {"not": "a list"}})
    item = {"type": "function_call", "call_id": "x", "name": "f", "arguments": "{}"}
    assert output_calls(
        [item, {"type": "computer_call"}, {"type": "message", "content": [{"type": "output_text", "text": "hi"}]}]
    ) == ([item], ["computer_call"], "hi")
    block = {"type": "tool_use", "id": "x", "name": "f", "input": {}}
    assert content_calls([{"type": "text", "text": "hi"}, block, {"type": "mystery"}]) == ([block], ["mystery"], "hi")


@pytest.mark.parametrize(
    ("call", "parallel", "count"),
    [
        (GOOD, False, 1),
        ([GOOD, GOOD], True, 2),
        ({"role": "assistant", "tool_calls": [GOOD]}, True, 1),
        ({"role": "assistant", "content": [{"type": "tool_use"}, {"type": "text"}]}, True, 1),
        ('[{"name": "f"}]', False, 1),
    ],
)
def test_parallel_calls_and_their_count(call, parallel, count):
    assert (is_parallel(call), count_calls(call)) == (parallel, count)


def test_the_static_stage_alone_is_one_library_call():
    one = check_static(COERCED, TOOLS, judge_skipped="static only")
    assert one.judge_skipped == "static only" and one.overall_valid is False and one.grounding == ()
    several = check_static([GOOD, MISSING], TOOLS)
    assert [result.overall_valid for result in several] == [True, False]


# --- the gateway reads them from the gate ------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "rounds", "action"),
    [
        ({"upstream": {"max_reflect_rounds": 1}}, 1, "deny"),  # the alias, as configs set it before
        (
            {"upstream": {"max_reflect_rounds": 2, "reflect_fallback": "escalate"}, "gate": {"max_reflect_rounds": 0}},
            0,
            "escalate",
        ),  # gate: wins for the rounds; the fallback set only under upstream: still holds
        ({"gate": {"max_reflect_rounds": 1, "reflect_fallback": "escalate"}}, 1, "escalate"),
    ],
)
async def test_the_gateway_takes_its_rounds_and_fallback_from_the_gate_policy(settings, rounds, action):
    pytest.importorskip("aiohttp")
    import json

    from reflection.service._metrics import Metrics
    from reflection.service.gateway import Gateway
    from reflection.testing.upstream import StandInModel

    stubborn = {"tool_calls": [{"name": "get_forecast_for_city", "arguments": {"city": "Paris"}}]}
    with StandInModel({"stubborn": [stubborn]}) as upstream:
        config = ReflectionConfig(
            **{**settings, "upstream": {"base_url": upstream.base_url, **settings.get("upstream", {})}}
        )
        request = json.dumps(
            {"model": "stubborn", "tools": TOOLS, "messages": [{"role": "user", "content": "Weather in Paris?"}]}
        ).encode()
        async with Gate(config) as gate, Gateway(config.upstream, gate, Metrics().for_tenant("default")) as gateway:
            response = await gateway.handle(request, {"content-type": "application/json"}, {})
    reflection = json.loads(response.body)["reflection"]
    assert (reflection["rounds"], reflection["actions"]) == (rounds, [action])
    assert len(upstream.requests) == 1 + rounds


def test_one_call_in_any_shape_has_one_identity():
    from reflection.formats import call_identity

    openai_call = {"id": "x", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    assert (
        call_identity(openai_call)
        == call_identity({"name": "f", "arguments": {"a": 1}})
        == call_identity({"type": "tool_use", "id": "y", "name": "f", "input": {"a": 1}})
    )
    assert call_identity(openai_call) != call_identity({"name": "f", "arguments": {"a": 2}})
    assert call_identity({"name": "f", "arguments": "not json"}) == b'["f","not json"]'
    assert call_identity({"name": "f", "arguments": '{"a": "\\ud800"}'})  # a lone surrogate: still a key


def test_an_mcp_tools_call_is_read_and_written_through_formats():
    from reflection.formats import mcp_call, mcp_corrected_params

    params = {"name": "get_weather", "arguments": {"days": "3"}, "_meta": {"progressToken": 1}}
    call = mcp_call(params)
    assert call == {"name": "get_weather", "arguments": {"days": "3"}}
    assert mcp_call({"name": 7}) == {"name": "", "arguments": {}}
    assert mcp_corrected_params(params, call, {"name": "get_weather", "arguments": {"days": 3}}) == {
        "name": "get_weather",
        "arguments": {"days": 3},
        "_meta": {"progressToken": 1},
    }
