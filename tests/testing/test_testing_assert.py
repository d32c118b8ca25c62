"""`reflection.testing.assert_valid_call`: passes a valid call, returns its result, and fails
an invalid or unknown one with the failing checks and their evidence."""

import pytest

from reflection import ReflectionConfig
from reflection.testing import FakeJudge, assert_valid_call

TOOLS = [
    {
        "name": "get_order",
        "description": "Look up an order by its id.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "copies": {"type": "integer"}},
            "required": ["order_id"],
        },
    }
]
ASKED = "Where is my order A-17?"


def failure(call, fake=None, **options):
    config = ReflectionConfig(judge=fake.config) if fake else ReflectionConfig()
    with pytest.raises(AssertionError) as caught:
        assert_valid_call(call, TOOLS, ASKED, config=config, **options)
    return str(caught.value)


def test_a_valid_call_passes_and_returns_its_result(fake_judge):
    result = assert_valid_call(
        {"name": "get_order", "arguments": {"order_id": "A-17"}},
        TOOLS,
        ASKED,
        config=ReflectionConfig(judge=fake_judge.config),
    )
    assert result.overall_valid is True and fake_judge.requests


def test_a_judge_failure_is_reported_with_score_explanation_and_evidence(fake_judge):
    fake_judge.script(
        "general_hallucination_check",
        score=1,
        evidence=[ASKED],
        explanation="The user asked about A-17, not B-99.",
        correction={"suggested_arguments_json": '{"order_id": "A-17"}'},
    )
    message = failure({"name": "get_order", "arguments": {"order_id": "B-99"}}, fake_judge)
    assert message.splitlines() == [
        'tool call get_order({"order_id":"B-99"}) is not valid:',
        "  judge general_hallucination_check failed (score 1/5, confidence 0.9): The user asked about A-17, not B-99.",
        "    evidence: 'Where is my order A-17?'",
        '    suggested arguments: {"order_id":"A-17"}',
        '  values found nowhere in the conversation or the specs: $.order_id = "B-99"',
    ]


def test_the_docs_show_the_message_the_helper_writes(fake_judge):
    from pathlib import Path

    fake_judge.script(
        "general_hallucination_check", score=1, evidence=[ASKED], explanation="The user asked about A-17, not B-99."
    )
    message = failure({"name": "get_order", "arguments": {"order_id": "B-99"}}, fake_judge)
    assert message in (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text()


def test_static_failures_list_their_findings_and_the_correction_without_a_judge():
    message = failure({"name": "get_order", "arguments": {"order_id": "A-17", "copies": "2"}})
    assert message.splitlines()[:2] == [
        'tool call get_order({"order_id":"A-17","copies":"2"}) is not valid:',
        "  static incorrect_parameter_type failed",
    ]
    assert "    $.copies: " in message
    assert 'corrected call (passes the static checks): get_order({"order_id":"A-17","copies":2})' in message


def test_an_unknown_verdict_fails_unless_allowed():
    with FakeJudge(max_attempts=1) as fake:
        fake.fail(500, times=2)
        message = failure({"name": "get_order", "arguments": {"order_id": "A-17"}}, fake)
        fake.fail(500, times=1)
        result = assert_valid_call(
            {"name": "get_order", "arguments": {"order_id": "A-17"}},
            TOOLS,
            ASKED,
            config=ReflectionConfig(judge=fake.config),
            allow_unknown=True,
        )
    assert message.startswith('tool call get_order({"order_id":"A-17"}) has no verdict (unknown):\n')
    assert "  judge general_hallucination_check: no answer: HTTP 500" in message
    assert result.overall_valid is None


def test_several_calls_give_a_list_and_each_failing_one_is_described(fake_judge):
    calls = {
        "role": "assistant",
        "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "A-17"}'}},
            {"id": "2", "type": "function", "function": {"name": "get_ordr", "arguments": '{"order_id": "A-17"}'}},
        ],
    }
    message = failure(calls, fake_judge)
    assert message.startswith(
        'tool call get_ordr({"order_id":"A-17"}) is not valid:\n  static non_existent_function failed'
    )
    assert "get_order(" not in message.splitlines()[0]


async def test_it_works_inside_an_async_test(fake_judge):
    result = assert_valid_call(
        {"name": "get_order", "arguments": {"order_id": "A-17"}},
        TOOLS,
        ASKED,
        config=ReflectionConfig(judge=fake_judge.config),
    )
    assert result.overall_valid is True


def test_untrusted_text_is_one_plain_line_per_item(fake_judge):
    fake_judge.script(
        "general_hallucination_check", score=1, explanation="line one\nline two\x1b[31m", evidence=["a\nb"]
    )
    message = failure({"name": "get_order", "arguments": {"order_id": "B-99"}}, fake_judge)
    assert "\x1b" not in message
    assert "line one\\x0aline two\\x1b[31m" in message
