"""`reflect()` end to end: static gate, judge (mocked at the HTTP layer), verdict and flat keys."""

import asyncio

import pytest

from reflection import ReflectionConfig, Reflector, reflect, reflect_sync
from reflection.model import SEMANTIC_CHECKS, STATIC_CHECKS
from reflection.testing import FakeJudge
from reflection.testing.server import StandInJudge

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "send_email",
            "description": "Send an email.",
            "parameters": {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]},
        },
    },
]
HISTORY = [{"role": "user", "content": "What's the weather in Paris and in Rome?"}]
CALL = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
BAD_CALL = {"name": "get_weather", "arguments": '{"town": "Paris"}'}


def cfg(judge, **kw):
    return ReflectionConfig(judge=judge.config, **kw)


async def test_combined_mode_asks_all_four_checks_in_one_request(fake_judge):
    result = await reflect(CALL, TOOLS, HISTORY, config=cfg(fake_judge))
    assert len(fake_judge.requests) == 1
    assert fake_judge.requests[0].checks == list(SEMANTIC_CHECKS)
    assert {name: c.status for name, c in result.semantic.items()} == dict.fromkeys(SEMANTIC_CHECKS, "passed")
    assert result.overall_valid is True


async def test_per_check_mode_sends_one_request_per_check(fake_judge):
    result = await reflect(CALL, TOOLS, HISTORY, config=cfg(fake_judge, mode="per_check"))
    assert sorted(r.checks[0] for r in fake_judge.requests) == sorted(SEMANTIC_CHECKS)
    assert result.usage.requests == 4 and result.overall_valid is True


async def test_flat_keys_follow_the_public_contract(fake_judge):
    fake_judge.script("general_hallucination_check", score=3)
    flat = (await reflect(CALL, TOOLS, HISTORY, config=cfg(fake_judge))).flat()
    assert list(flat) == [f"static_{c}" for c in STATIC_CHECKS] + [
        "semantic_general_hallucination_check",
        "semantic_general_value_format_alignment",
        "semantic_avg_score_general",
        "semantic_function_selection_appropriateness",
        "semantic_agentic_constraints_satisfaction",
        "semantic_avg_score_function_selection",
        "overall_valid",
    ]
    assert flat["semantic_general_hallucination_check"] == 0.5
    assert flat["semantic_avg_score_general"] == 0.75
    assert flat["overall_valid"] == 0.0


async def test_a_check_passes_when_its_score_reaches_its_threshold(fake_judge):
    fake_judge.script("function_selection_appropriateness", score=3).script("general_value_format_alignment", score=3)
    result = await reflect(CALL, TOOLS, HISTORY, config=cfg(fake_judge))
    assert result.semantic["function_selection_appropriateness"].status == "passed"  # default threshold 3
    assert result.semantic["general_value_format_alignment"].status == "failed"  # default threshold 4
    relaxed = await reflect(
        CALL, TOOLS, HISTORY, config=cfg(fake_judge, thresholds={"general_value_format_alignment": 3})
    )
    assert relaxed.overall_valid is True


async def test_static_failure_skips_the_judge(fake_judge):
    result = await reflect(BAD_CALL, TOOLS, HISTORY, config=cfg(fake_judge))
    assert fake_judge.requests == []
    assert result.overall_valid is False and "static stage failed" in result.judge_skipped
    assert "semantic_avg_score_general" not in result.flat()


async def test_judge_can_never_override_a_static_failure(fake_judge):
    result = await reflect(BAD_CALL, TOOLS, HISTORY, config=cfg(fake_judge, continue_on_static=True))
    assert len(fake_judge.requests) == 1
    assert all(c.status == "passed" for c in result.semantic.values())
    assert result.overall_valid is False


async def test_judge_failure_after_retries_is_an_error_and_the_verdict_unknown(fake_judge):
    fake_judge.fail(500, times=3)
    result = await reflect(CALL, TOOLS, HISTORY, config=cfg(fake_judge))
    check = result.semantic["general_hallucination_check"]
    assert check.status == "error" and "HTTP 500" in check.error
    assert result.overall_valid is None
    assert "overall_valid" not in result.flat() and "semantic_general_hallucination_check" not in result.flat()


async def test_out_of_range_scores_are_re_asked_then_accepted(fake_judge):
    bad = {
        name: {"evidence": [], "explanation": "", "confidence": 0.9, "score": 9, "correction": None}
        for name in SEMANTIC_CHECKS
    }
    fake_judge.reply_json(bad)
    result = await reflect(CALL, TOOLS, HISTORY, config=cfg(fake_judge))
    assert len(fake_judge.requests) == 2 and result.overall_valid is True
    assert "the score must be an integer from 1 to 5" in fake_judge.requests[1].messages[-1]["content"]


async def test_low_confidence_marks_a_check_uncertain(fake_judge):
    fake_judge.script("agentic_constraints_satisfaction", score=5, confidence=0.2)
    result = await reflect(CALL, TOOLS, HISTORY, config=cfg(fake_judge, uncertain_below=0.5))
    assert result.semantic["agentic_constraints_satisfaction"].status == "uncertain"
    assert result.overall_valid is None


async def test_semantic_result_carries_evidence_explanation_and_correction(fake_judge):
    fake_judge.script(
        "function_selection_appropriateness",
        score=1,
        evidence=["weather in Paris"],
        explanation="the user asked about weather",
        correction={"better_function": "get_weather"},
    )
    check = (
        await reflect({"name": "send_email", "arguments": {"to": "a@b.c"}}, TOOLS, HISTORY, config=cfg(fake_judge))
    ).semantic["function_selection_appropriateness"]
    assert (check.status, check.score, check.evidence, check.correction.better_function) == (
        "failed",
        1,
        ("weather in Paris",),
        "get_weather",
    )


async def test_parallel_calls_are_each_reflected_with_their_siblings_as_context(fake_judge):
    calls = [CALL, {"name": "get_weather", "arguments": {"city": "Rome"}}]
    results = await reflect(calls, TOOLS, HISTORY, config=cfg(fake_judge))
    assert [r.call.arguments["city"] for r in results] == ["Paris", "Rome"]
    assert sorted(r.data["other_calls_in_same_turn"][0]["arguments"]["city"] for r in fake_judge.requests) == [
        "Paris",
        "Rome",
    ]


async def test_grounding_is_on_the_result_and_sent_to_the_judge(fake_judge):
    result = await reflect(CALL, TOOLS, HISTORY, config=cfg(fake_judge))
    assert result.grounding[0].sources[0].kind == "user"
    assert fake_judge.requests[0].data["grounding"][0]["path"] == "$.city"


async def test_without_a_judge_static_and_grounding_run_and_the_skip_is_said():
    result = await reflect(CALL, TOOLS, HISTORY)
    assert result.semantic == {} and "no judge configured" in result.judge_skipped
    assert result.overall_valid is True and result.grounding


def test_strict_fake_judge_fails_on_unexpected_requests():
    with pytest.raises(AssertionError, match="unscripted"):
        with FakeJudge(strict=True) as judge:
            judge.script("general_hallucination_check", score=5)
            asyncio.run(reflect(CALL, TOOLS, HISTORY, config=cfg(judge)))


async def test_reflector_reuses_one_judge_and_keeps_input_order(fake_judge):
    async with Reflector(cfg(fake_judge)) as reflector:
        rows = [
            {"call": {"name": "get_weather", "arguments": {"city": c}}, "tools": TOOLS, "history": HISTORY}
            for c in ("Paris", "Rome", "Oslo")
        ]
        results = await reflector.reflect_many(rows, concurrency=2)
        judge = reflector.judge
    assert [r.call.arguments["city"] for r in results] == ["Paris", "Rome", "Oslo"]
    assert judge._http.is_closed


def test_sync_wrapper_works_outside_an_event_loop(fake_judge):
    assert reflect_sync(CALL, TOOLS, HISTORY, config=cfg(fake_judge)).overall_valid is True


async def test_sync_wrapper_works_inside_a_running_event_loop(fake_judge):
    assert reflect_sync(CALL, TOOLS, HISTORY, config=cfg(fake_judge)).overall_valid is True


@pytest.mark.parametrize("mode", ["combined", "per_check"])
async def test_end_to_end_against_the_stand_in_server(mode):
    from reflection.judge import JudgeConfig

    with StandInJudge() as server:
        config = ReflectionConfig(judge=JudgeConfig(base_url=server.base_url, model="stand-in"), mode=mode)
        good = await reflect(CALL, TOOLS, HISTORY, config=config)
        invented = await reflect(
            {"name": "get_weather", "arguments": {"city": "Berlin"}}, TOOLS, HISTORY, config=config
        )
    assert good.overall_valid is True
    assert invented.semantic["general_hallucination_check"].score == 2 and invented.overall_valid is False
    assert good.usage.requests == (1 if mode == "combined" else 4)


async def test_judge_reached_through_json_object_fallback_on_a_server_without_json_schema():
    from reflection.judge import JudgeConfig

    with StandInJudge(reject_json_schema=True) as server:
        config = ReflectionConfig(judge=JudgeConfig(base_url=server.base_url, model="no-schema"))
        result = await reflect(CALL, TOOLS, HISTORY, config=config)
    assert result.overall_valid is True and result.usage.requests == 2
