"""`ReflectionResult.feedback()`: plain, deterministic, bounded text for the agent's model."""

from reflection import ReflectionConfig, Reflector
from reflection.static import check_call

TOOLS = [
    {
        "name": "transfer",
        "description": "Send money.",
        "parameters": {
            "type": "object",
            "properties": {
                "account": {"type": "string"},
                "amount": {"type": "number"},
                "currency": {"type": "string", "enum": ["EUR", "USD"]},
            },
            "required": ["account", "amount"],
            "additionalProperties": False,
        },
    }
]
HISTORY = [{"role": "user", "content": "Send 40 EUR to account DE-1234."}]


async def reflect(call, fake_judge=None, history=HISTORY):
    config = ReflectionConfig(judge=fake_judge.config) if fake_judge else ReflectionConfig()
    async with Reflector(config) as reflector:
        return await reflector.reflect(call, TOOLS, history)


async def test_a_valid_call_has_no_feedback(fake_judge):
    result = await reflect({"name": "transfer", "arguments": {"account": "DE-1234", "amount": 40}}, fake_judge)
    assert result.overall_valid is True and result.feedback() is None


async def test_static_feedback_lists_each_failing_check_with_its_path_and_the_correction():
    result = await reflect(
        {"name": "transfer", "arguments": {"account": "DE-1234", "amount": "40", "currency": "eur", "memo": "rent"}}
    )
    assert result.feedback() == (
        'The call to "transfer" was not run. Fix these problems and propose the call again:\n'
        f"- non_existent_parameter: {result.static.checks['non_existent_parameter'].findings[0].message}\n"
        f"- incorrect_parameter_type: {result.static.checks['incorrect_parameter_type'].findings[0].message}\n"
        f"- allowed_values_violation: {result.static.checks['allowed_values_violation'].findings[0].message}\n"
        'Suggested call (passes the static checks): "transfer" {"account":"DE-1234","amount":40,"currency":"EUR"}'
    )
    assert "$.amount" in result.feedback() and "$.memo" in result.feedback()


async def test_semantic_feedback_names_the_parameters_the_judge_points_at_and_ungrounded_ones(fake_judge):
    fake_judge.script(
        "general_value_format_alignment",
        score=2,
        explanation="The amount should be 40, as the user said.",
        correction={
            "suggested_arguments_json": '{"account": "DE-1234", "amount": 40}',
            "better_function": None,
            "missing_prerequisite": None,
        },
    )
    result = await reflect({"name": "transfer", "arguments": {"account": "DE-9999", "amount": 4000}}, fake_judge)
    feedback = result.feedback()
    assert "- general_value_format_alignment (score 2/5): The amount should be 40, as the user said." in feedback
    assert (
        '  parameters: $.account (value "DE-9999" not found in the conversation), '
        "$.amount (value 4000 not found in the conversation)"
    ) in feedback
    assert '  suggested arguments: {"account":"DE-1234","amount":40}' in feedback


async def test_feedback_is_deterministic_and_bounded(fake_judge):
    fake_judge.script("general_hallucination_check", score=1, explanation="invented " * 500)
    result = await reflect({"name": "transfer", "arguments": {"account": "X-1", "amount": 40}}, fake_judge)
    assert result.feedback() == result.feedback()
    assert len(result.feedback(max_chars=300)) == 300 and result.feedback(max_chars=300).endswith("…")


async def test_untrusted_text_reaches_the_feedback_without_control_characters(fake_judge):
    fake_judge.script(
        "general_hallucination_check", score=1, explanation="bad\x1b[31m red\x07 \u202eevil\u200b\nnext line"
    )
    result = await reflect({"name": "transfer", "arguments": {"account": "A\x1b]0;t\x07", "amount": 40}}, fake_judge)
    feedback = result.feedback()
    assert not any(ch in feedback for ch in "\x1b\x07\u202e\u200b")
    assert "bad [31m red evil next line" in feedback
    assert all(line.isprintable() for line in feedback.split("\n"))


def test_a_judge_failure_is_named_as_unchecked_not_as_a_failure():
    # Built from the checker's own parts, as the pipeline does when the judge errors.
    from reflection.model import ReflectionResult, SemanticCheckResult

    static = check_call({"name": "transfer", "arguments": {"account": "DE-1234", "amount": 40}}, TOOLS)
    result = ReflectionResult(
        call=static.call,
        static=static,
        overall_valid=None,
        semantic={
            "general_hallucination_check": SemanticCheckResult(status="error", error="HTTP 500 from the judge endpoint")
        },
    )
    assert result.feedback().endswith(
        "- general_hallucination_check could not be checked: HTTP 500 from the judge endpoint"
    )


async def test_a_parameter_is_implicated_by_its_whole_name_or_value_only(fake_judge):
    tools = [
        {
            "name": "lookup",
            "parameters": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "limit": {"type": "integer"}, "region": {"type": "string"}},
            },
        }
    ]
    history = [{"role": "user", "content": "Look up record r-1 in region eu, at most 40 rows."}]
    fake_judge.script("general_value_format_alignment", score=2, explanation="The evidence shows limit 400 was meant.")
    async with Reflector(ReflectionConfig(judge=fake_judge.config)) as reflector:
        result = await reflector.reflect(
            {"name": "lookup", "arguments": {"id": "r-1", "limit": 40, "region": "eu"}}, tools, history
        )
    assert "  parameters: $.limit\n" in result.feedback() + "\n"
