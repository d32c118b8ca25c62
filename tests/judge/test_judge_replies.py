"""Judges in the wild: every reply form real models and servers send is read, coerced only
where its meaning is certain, and never turned into a wrong verdict (issue 10)."""

import subprocess
import sys

import httpx
import pytest
import respx

from reflection import ReflectionConfig, reflect
from reflection._json import dumps, parse_json
from reflection.judge.reply import UnreadableReply, read_json, reply_text
from reflection.judge import Judge, JudgeConfig
from reflection.model import SEMANTIC_CHECKS
from reflection.semantic import CONFIDENCE_WORDS, read_check
from reflection.testing import REPLY_STYLES, TRUNCATED_BUDGET, FakeJudge
from reflection.testing._protocol import ReplyStyler, check_reply, completion
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
            "name": "get_time",
            "description": "Local time in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
]
HISTORY = [{"role": "user", "content": "What's the weather in Paris?"}]
CALL = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
INVENTED = {"name": "get_weather", "arguments": '{"city": "Atlantis"}'}
REPLY_MARKER = "TEXT-FROM-THE-REPLY"
SESSION_MARKER = "TEXT-FROM-THE-SESSION"


def message(content=None, **fields):
    return {"role": "assistant", "content": content, **fields}


def read(content=None, **fields):
    return read_json(reply_text(message(content, **fields)))


# --- reading the message -------------------------------------------------------------------

OBJECT = {"score": 4, "explanation": "fine"}


@pytest.mark.parametrize(
    "content",
    [
        dumps(OBJECT),
        f"Here is my assessment: {dumps(OBJECT)} Let me know if you need anything else.",
        f"Sure.\n\n```json\n{dumps(OBJECT)}\n```\nHope this helps.",
        f"```\n{dumps(OBJECT)}\n```",
        f'<think>\nmaybe {{"score": 1}} instead?\n</think>\n{dumps(OBJECT)}',
        f'reasoning whose opening tag the server cut off {{"score": 1}}</think>\n\n{dumps(OBJECT)}',
        dumps(dumps(OBJECT)),
        "{'score': 4, 'explanation': 'fine'}",
        '{"score": 4, "explanation": "fine",}',
        "Result: {'score': 4, 'explanation': 'fine', 'flag': None, 'ok': True}",
    ],
    ids=[
        "strict",
        "prose",
        "fenced",
        "bare_fence",
        "think",
        "cut_think",
        "double_encoded",
        "single_quotes",
        "trailing_comma",
        "python_literals_in_prose",
    ],
)
def test_the_reply_object_is_found_whatever_its_wrapping(content):
    data = read(content)
    assert {key: data[key] for key in OBJECT} == OBJECT


def test_reasoning_fields_beside_content_are_not_read_as_the_answer():
    draft = dumps({"score": 1, "explanation": "draft"})
    assert read(dumps(OBJECT), reasoning_content=draft) == OBJECT
    assert read(dumps(OBJECT), reasoning=draft) == OBJECT


@pytest.mark.parametrize("arguments", [dumps(OBJECT), OBJECT])
def test_a_tool_calls_arguments_are_read_when_content_is_null(arguments):
    call = {"id": "c1", "type": "function", "function": {"name": "review", "arguments": arguments}}
    assert read(None, tool_calls=[call]) == OBJECT


def test_a_tool_call_beside_a_remark_is_the_answer():
    call = {"id": "c1", "type": "function", "function": {"name": "review", "arguments": dumps(OBJECT)}}
    assert read("I'll submit my review with the tool.", tool_calls=[call]) == OBJECT


def test_content_parts_are_joined():
    assert read([{"type": "text", "text": dumps(OBJECT)}]) == OBJECT


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"content": None, "refusal": "I can't help with that."}, "refused"),
        ({"content": ""}, "empty reply"),
        ({"content": "   \n"}, "empty reply"),
        ({"content": None, "reasoning_content": "thinking..."}, "only its reasoning"),
    ],
)
def test_refusal_and_empty_replies_are_reported_as_such(fields, reason):
    with pytest.raises(UnreadableReply, match=reason):
        reply_text({"role": "assistant", **fields})


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("Sure! Here is my review: looks fine.", "no JSON object"),
        ('{"score": 4, "explanation": "the reply was cut', "cut off"),
        ('{"score": 4} and on second thought {"score": 2}', "several different"),
        ("[1, 2]", "not another JSON value"),
    ],
)
def test_a_reply_without_exactly_one_certain_object_is_unreadable(content, reason):
    with pytest.raises(UnreadableReply, match=reason):
        read_json(content)


def test_the_same_object_twice_is_one_answer():
    assert read(f"```json\n{dumps(OBJECT)}\n```\nagain:\n```json\n{dumps(OBJECT)}\n```") == OBJECT


# --- coercing one check's answer -------------------------------------------------------------


@pytest.mark.parametrize(
    ("score", "note"),
    [("4", "score given as text, read as 4"), (4.0, "score 4.0 read as 4"), (" 4 ", "score given as text, read as 4")],
)
def test_a_score_whose_meaning_is_certain_is_read_with_a_note(score, note):
    reply = read_check({**check_reply(3), "score": score})
    assert reply.score == 4 and reply.notes == (note,)


@pytest.mark.parametrize("score", [3.5, 0, 6, "good", "4/5", True, None, [4]])
def test_a_score_is_never_guessed(score):
    with pytest.raises(ValueError, match="score"):
        read_check({**check_reply(3), "score": score})


def test_a_missing_score_is_invalid():
    answer = check_reply(3)
    del answer["score"]
    with pytest.raises(ValueError, match="score is missing"):
        read_check(answer)


@pytest.mark.parametrize(
    ("confidence", "value"),
    [
        (85, 0.85),
        ("85%", 0.85),
        ("85", 0.85),
        (85.0, 0.85),
        ("0.7", 0.7),
        (1, 1.0),
        (0, 0.0),
        *[(word, number) for word, number in CONFIDENCE_WORDS.items()],
        ("HIGH", CONFIDENCE_WORDS["high"]),
    ],
)
def test_confidence_percentages_and_words_are_read_as_probabilities(confidence, value):
    reply = read_check({**check_reply(3), "confidence": confidence})
    assert reply.confidence == pytest.approx(value)
    assert reply.notes == () if isinstance(confidence, int) and confidence in (0, 1) else len(reply.notes) == 1


def test_confidence_words_are_the_documented_numbers():
    assert CONFIDENCE_WORDS == {"high": 0.9, "medium": 0.6, "low": 0.3}


@pytest.mark.parametrize("confidence", [150, -1, "very", "120%", float("nan"), True, [0.5]])
def test_an_unreadable_confidence_is_dropped_and_the_score_stands(confidence):
    reply = read_check({**check_reply(2), "confidence": confidence})
    assert reply.score == 2 and reply.confidence is None
    assert any("confidence" in note for note in reply.notes)


def test_a_single_evidence_string_is_a_list_of_one():
    reply = read_check({**check_reply(2), "evidence": "order 123"})
    assert reply.evidence == ("order 123",) and reply.notes == ("a single evidence string read as a list of one",)


def test_missing_optional_fields_take_their_defaults_and_extra_keys_are_ignored():
    reply = read_check({"score": 5, "explanation": "ok", "reasoning": "long thoughts", "passed": True})
    assert (reply.score, reply.evidence, reply.correction, reply.confidence) == (5, (), None, None)
    assert reply.notes == ("no confidence given",)


def test_an_exact_answer_needs_no_notes():
    reply = read_check(
        check_reply(4, evidence=["q"], confidence=0.8, correction={"suggested_arguments_json": {"city": "Rome"}})
    )
    assert (reply.score, reply.confidence, reply.evidence, reply.notes) == (4, 0.8, ("q",), ())
    assert reply.correction.suggested_arguments == {"city": "Rome"}


@pytest.mark.parametrize(
    ("correction", "note"),
    [
        ({"suggested_arguments_json": "use the date the user gave"}, "suggested arguments were not a JSON object"),
        ({"suggested_arguments_json": "[1, 2]"}, "suggested arguments were not a JSON object"),
        ({"suggested_arguments_json": '{"a": ' * 300 + "1" + "}" * 300}, "suggested arguments cannot be used (nesting"),
        ({"suggested_arguments_json": {"n": 10**5000}}, "suggested arguments cannot be used (an integer"),
        ({"better_function": "no_such_tool"}, "better_function is not one of the tools"),
        ({"missing_prerequisite": 42}, "missing_prerequisite was not text"),
        ("call get_time first", "correction was not an object"),
    ],
)
def test_a_malformed_optional_part_is_dropped_with_a_note_and_the_score_stands(correction, note):
    reply = read_check({**check_reply(2), "correction": correction}, frozenset({"get_weather", "get_time"}))
    assert reply.score == 2 and reply.correction is None
    assert any(note in n for n in reply.notes)


def test_the_valid_parts_of_a_correction_are_kept():
    correction = {"suggested_arguments_json": "prose", "better_function": "get_time", "missing_prerequisite": None}
    reply = read_check({**check_reply(2), "correction": correction}, frozenset({"get_weather", "get_time"}))
    assert reply.correction.better_function == "get_time" and reply.correction.suggested_arguments is None


# --- through the real client: every style --------------------------------------------------


def expected_requests(style):
    return 2 if style in ("empty", "truncated") else 1  # re-asked: the same request, or with a bigger budget


@pytest.mark.parametrize("style", REPLY_STYLES)
@pytest.mark.parametrize(("call", "verdict"), [(CALL, True), (INVENTED, False)], ids=["valid", "invented"])
async def test_the_semantic_stage_gives_the_right_verdict_in_every_reply_style(style, call, verdict):
    with FakeJudge(reply_style=style) as judge:
        if verdict is False:
            judge.script("general_hallucination_check", score=2, explanation="Atlantis appears nowhere")
        result = await reflect(call, TOOLS, HISTORY, config=ReflectionConfig(judge=judge.config))
    assert result.overall_valid is verdict, result.semantic
    assert result.semantic["general_hallucination_check"].score == (2 if verdict is False else 5)
    if style != "mixture":
        assert result.usage.requests == expected_requests(style)


@pytest.mark.parametrize("style", REPLY_STYLES)
async def test_every_reply_style_is_read_in_per_check_mode(style):
    with FakeJudge(reply_style=style) as judge:
        judge.script("general_hallucination_check", score=2)
        result = await reflect(INVENTED, TOOLS, HISTORY, config=ReflectionConfig(judge=judge.config, mode="per_check"))
    assert result.overall_valid is False
    assert {name: check.score for name, check in result.semantic.items()} == {
        name: 2 if name == "general_hallucination_check" else 5 for name in SEMANTIC_CHECKS
    }


async def test_a_truncated_reply_is_never_completed_by_a_guess_but_asked_again_with_more_room():
    with FakeJudge(reply_style="truncated") as judge:
        judge.script("general_hallucination_check", score=2)
        result = await reflect(INVENTED, TOOLS, HISTORY, config=ReflectionConfig(judge=judge.config))
    budgets = [r.body["max_completion_tokens"] for r in judge.requests]
    assert budgets[0] <= TRUNCATED_BUDGET < budgets[1] and len(budgets) == 2
    assert result.overall_valid is False


def test_a_truncated_style_reply_is_whole_for_a_larger_completion_budget():
    styler = ReplyStyler("truncated")
    reply = {name: check_reply(5) for name in SEMANTIC_CHECKS}
    cut = styler.completion(reply, {"messages": [], "max_completion_tokens": TRUNCATED_BUDGET})["choices"][0]
    whole = styler.completion(reply, {"messages": [], "max_tokens": TRUNCATED_BUDGET * 2})["choices"][0]
    assert cut["finish_reason"] == "length" and len(cut["message"]["content"]) < len(dumps(reply))
    assert whole["finish_reason"] == "stop" and parse_json(whole["message"]["content"]) == reply


def test_mixture_spreads_requests_over_every_style():
    styler = ReplyStyler("mixture")
    reply = {name: check_reply(5) for name in SEMANTIC_CHECKS}
    for i in range(600):
        styler.completion(reply, {"messages": [{"role": "user", "content": f"request {i}"}]})
    assert set(styler.counts) == set(REPLY_STYLES) - {"mixture"}


def test_an_unknown_reply_style_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="unknown reply style 'chatty'.*prose"):
        FakeJudge(reply_style="chatty")


async def test_notes_say_what_was_coerced_and_stay_out_of_the_flat_keys():
    with FakeJudge(reply_style="string_scores") as judge:
        result = await reflect(CALL, TOOLS, HISTORY, config=ReflectionConfig(judge=judge.config))
    notes = {name: check.notes for name, check in result.semantic.items()}
    assert notes["general_hallucination_check"] == ("score given as text, read as 5",)
    assert notes["general_value_format_alignment"] == ("score 5.0 read as 5",)
    assert not any("note" in key for key in result.flat())
    assert parse_json(result.model_dump_json())["semantic"]["general_hallucination_check"]["notes"] == [
        "score given as text, read as 5"
    ]


@pytest.mark.parametrize("style", ["single_quotes", "python_literals", "trailing_commas"])
async def test_a_repaired_near_json_reply_is_noted_on_every_check(style):
    with FakeJudge(reply_style=style) as judge:
        result = await reflect(CALL, TOOLS, HISTORY, config=ReflectionConfig(judge=judge.config))
    assert all(check.notes[0].startswith("the reply was near-JSON") for check in result.semantic.values())


async def test_a_bad_correction_costs_no_score_end_to_end():
    with FakeJudge(reply_style="bad_correction") as judge:
        judge.script("general_hallucination_check", score=2)
        result = await reflect(INVENTED, TOOLS, HISTORY, config=ReflectionConfig(judge=judge.config))
    check = result.semantic["general_hallucination_check"]
    assert (check.status, check.score, check.correction) == ("failed", 2, None)
    assert "the suggested better_function is not one of the tools; dropped" in check.notes
    assert result.usage.requests == 1


async def test_a_missing_confidence_never_makes_a_check_uncertain():
    with FakeJudge(reply_style="missing_optional") as judge:
        result = await reflect(CALL, TOOLS, HISTORY, config=ReflectionConfig(judge=judge.config, uncertain_below=0.5))
    assert result.overall_valid is True
    assert all(check.confidence is None and check.status == "passed" for check in result.semantic.values())


async def test_a_lone_checks_answer_without_its_name_is_read_in_per_check_mode():
    with FakeJudge() as judge:
        judge.reply_json(check_reply(2), times=1)
        result = await reflect(
            INVENTED,
            TOOLS,
            HISTORY,
            config=ReflectionConfig(judge=judge.config, mode="per_check", checks=("general_hallucination_check",)),
        )
    check = result.semantic["general_hallucination_check"]
    assert check.score == 2 and "without its name" in check.notes[0] and len(judge.requests) == 1


async def test_a_refusal_becomes_a_judge_error_that_says_so():
    config = JudgeConfig(base_url="http://judge.test/v1", model="m", api_key="k", max_attempts=1)
    with respx.mock(base_url=config.base_url) as router:
        router.post("/chat/completions").mock(
            return_value=httpx.Response(200, json=completion(None, {"messages": []}, refusal="I can't help with that."))
        )
        result = await reflect(CALL, TOOLS, HISTORY, config=ReflectionConfig(judge=config))
    assert result.overall_valid is None
    assert "refused" in result.semantic["general_hallucination_check"].error


def test_a_check_answered_twice_differently_is_not_guessed():
    from reflection.semantic import _parse_reply

    checks = ("general_hallucination_check", "general_value_format_alignment")
    data = {
        "general_hallucination_check": check_reply(5),
        "GENERAL_HALLUCINATION_CHECK": check_reply(2),
        "general_value_format_alignment": check_reply(4),
    }
    reading = _parse_reply(checks, None)(data)
    assert list(reading.replies) == ["general_value_format_alignment"]
    assert reading.problems == {"general_hallucination_check": "answered twice, differently"}


# --- salvaging partial replies ------------------------------------------------------------


def partial_reply():
    return {
        "general_hallucination_check": check_reply(2, explanation="Atlantis appears nowhere"),
        "general_value_format_alignment": check_reply(5),
        "function_selection_appropriateness": {**check_reply(5, explanation=REPLY_MARKER), "score": "good"},
        REPLY_MARKER: "ignore the schema",
    }


def session():
    return [{"role": "user", "content": f"What's the weather in Paris? {SESSION_MARKER}"}]


async def test_a_partial_reply_keeps_its_valid_checks_and_asks_only_the_rest_once():
    with FakeJudge() as judge:
        judge.reply_json(partial_reply())
        result = await reflect(INVENTED, TOOLS, session(), config=ReflectionConfig(judge=judge.config))
    assert len(judge.requests) == 2 and result.usage.requests == 2
    assert judge.requests[1].checks == ["function_selection_appropriateness", "agentic_constraints_satisfaction"]
    assert result.semantic["general_hallucination_check"].score == 2  # kept from the first reply
    assert result.overall_valid is False


async def test_the_follow_up_quotes_neither_the_reply_nor_the_session_outside_the_data_block():
    with FakeJudge() as judge:
        judge.reply_json(partial_reply())
        await reflect(INVENTED, TOOLS, session(), config=ReflectionConfig(judge=judge.config))
    follow_up = judge.requests[1]
    user = follow_up.messages[-1]["content"]
    outside = follow_up.messages[0]["content"] + user.split("<data>\n", 1)[0] + user.split("\n</data>", 1)[1]
    assert REPLY_MARKER not in follow_up.prompt
    assert SESSION_MARKER not in outside and SESSION_MARKER in follow_up.data["conversation"][0]["content"]
    assert "function_selection_appropriateness: the score must be an integer from 1 to 5" in outside
    assert "agentic_constraints_satisfaction: no answer for this check" in outside
    assert all(m["role"] != "assistant" for m in follow_up.messages)


async def test_checks_still_unanswered_after_the_follow_up_are_errors_and_the_rest_stand():
    still_bad = {
        "function_selection_appropriateness": check_reply(4),
        "agentic_constraints_satisfaction": {**check_reply(4), "score": 3.5},
    }
    with FakeJudge() as judge:
        judge.reply_json(partial_reply()).reply_json(still_bad)
        result = await reflect(CALL, TOOLS, HISTORY, config=ReflectionConfig(judge=judge.config))
    assert len(judge.requests) == 2
    statuses = {name: check.status for name, check in result.semantic.items()}
    assert statuses == {
        "general_hallucination_check": "failed",
        "general_value_format_alignment": "passed",
        "function_selection_appropriateness": "passed",
        "agentic_constraints_satisfaction": "error",
    }
    assert "no valid answer" in result.semantic["agentic_constraints_satisfaction"].error


async def test_a_reply_that_answers_no_check_is_re_asked_whole_without_echoing_values():
    bad = {name: {**check_reply(5), "score": "excellent"} for name in SEMANTIC_CHECKS}
    with FakeJudge() as judge:
        judge.reply_json(bad)
        result = await reflect(CALL, TOOLS, HISTORY, config=ReflectionConfig(judge=judge.config))
    assert result.overall_valid is True and len(judge.requests) == 2
    assert "excellent" not in judge.requests[1].messages[-1]["content"]


# --- the stand-in server -------------------------------------------------------------------


@pytest.mark.slow
async def test_the_stand_in_speaks_every_style_and_verdicts_stay_right():
    with StandInJudge(reply_style="mixture", idle_timeout=20) as server:
        config = ReflectionConfig(
            judge=JudgeConfig(base_url=server.base_url, model="stand-in", max_attempts=3, retry_max_wait=0)
        )
        for i in range(12):
            ok = await reflect(
                {"name": "get_weather", "arguments": {"city": "Paris"}},
                TOOLS,
                [{"role": "user", "content": f"Weather in Paris, please ({i})"}],
                config=config,
            )
            bad = await reflect(
                {"name": "get_weather", "arguments": {"city": f"Atlantis{i}"}},
                TOOLS,
                [{"role": "user", "content": f"Weather in Paris, please ({i})"}],
                config=config,
            )
            assert ok.overall_valid is True and bad.overall_valid is False
    assert len(server.styler.counts) > 5


@pytest.mark.slow
def test_the_stand_in_process_takes_a_reply_style():
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reflection.testing.server",
            "--reply-style",
            "tool_call",
            "--idle-timeout",
            "10",
            "--max-requests",
            "1",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        base_url = proc.stdout.readline().strip()
        body = {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": "<reply_schema>\n"
                    + dumps({"type": "object", "properties": {"general_hallucination_check": {}}})
                    + "\n</reply_schema>",
                }
            ],
        }
        answer = httpx.post(base_url + "/chat/completions", json=body, timeout=10).json()
        message = answer["choices"][0]["message"]
        assert message["content"] is None
        assert read_json(reply_text(message))["general_hallucination_check"]["score"] == 5
    finally:
        proc.wait(timeout=15)


async def test_the_judge_client_reads_a_tool_call_reply_for_any_validator():
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": dumps({"score": 3})}}
    with respx.mock(base_url="http://judge.test/v1") as router:
        router.post("/chat/completions").mock(
            return_value=httpx.Response(
                200, json=completion(None, {"messages": []}, finish_reason="tool_calls", tool_calls=[call])
            )
        )
        async with Judge(JudgeConfig(base_url="http://judge.test/v1", model="m", api_key="k")) as judge:
            answer = await judge.ask(
                [{"role": "user", "content": "rate"}], schema={}, schema_name="t", validate=lambda data: data["score"]
            )
    assert answer.value == 3


# --- properties over arbitrary JSON and text ----------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
ANSWER_KEYS = st.sampled_from(["score", "confidence", "evidence", "explanation", "correction", "other"])


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.dictionaries(ANSWER_KEYS, JSON, max_size=6) | JSON)
def test_any_answer_is_read_into_a_valid_check_or_refused(answer):
    try:
        reply = read_check(answer, frozenset({"get_weather"}))
    except ValueError:
        return
    assert type(reply.score) is int and 1 <= reply.score <= 5
    assert reply.confidence is None or 0.0 <= reply.confidence <= 1.0
    assert all(type(item) is str for item in reply.evidence) and type(reply.explanation) is str
    assert reply.correction is None or reply.correction.better_function in (None, "get_weather")
    assert isinstance(answer, dict) and answer.get("score") is not None


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_any_text_gives_an_object_or_says_why_not(text):
    try:
        value = read_json(text)
    except UnreadableReply:
        return
    assert isinstance(value, dict)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.text(min_size=1, max_size=8), JSON, min_size=1, max_size=4),
    st.text(alphabet=st.characters(blacklist_characters="{}`<>"), max_size=40),
    st.text(alphabet=st.characters(blacklist_characters="{}`<>"), max_size=40),
)
def test_a_strict_object_in_prose_is_read_exactly(obj, before, after):
    assert read_json(f"{before} {dumps(obj)} {after}") == obj
