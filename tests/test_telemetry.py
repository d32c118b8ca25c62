"""OpenTelemetry spans (GenAI semantic conventions), read back with the SDK's in-memory exporter."""

import subprocess
import sys

import pytest

from reflection import Gate, GatePolicy, ReflectionConfig, Reflector, telemetry
from reflection.model import SEMANTIC_CHECKS, STATIC_CHECKS

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace", reason="needs opentelemetry-sdk (the dev extra)")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

TOOLS = [
    {
        "name": "get_order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    }
]
HISTORY = [{"role": "user", "content": "Where is order A-17?"}]
CALL = {"name": "get_order", "arguments": {"order_id": "A-17"}}


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.set_tracer_provider(provider)
    yield exporter
    telemetry.set_tracer_provider(None)
    provider.shutdown()


def by_name(exporter):
    return {span.name: span for span in exporter.get_finished_spans()}


async def test_a_reflection_gives_a_reflection_span_with_a_chat_span_per_judge_request(fake_judge, spans):
    async with Reflector(ReflectionConfig(judge=fake_judge.config)) as reflector:
        await reflector.reflect(CALL, TOOLS, HISTORY)
    found = by_name(spans)
    reflection, chat = found["evaluate get_order"], found["chat fake-judge"]
    assert chat.parent.span_id == reflection.context.span_id
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "fake-judge"
    assert chat.attributes["server.address"] == "fake-judge.test"
    assert chat.attributes["gen_ai.usage.input_tokens"] > 0 and chat.attributes["gen_ai.usage.output_tokens"] > 0
    assert reflection.attributes["gen_ai.operation.name"] == "evaluate"
    assert reflection.attributes["gen_ai.request.model"] == "fake-judge"
    assert reflection.attributes["gen_ai.usage.input_tokens"] == chat.attributes["gen_ai.usage.input_tokens"]
    assert reflection.attributes["reflection.overall_valid"] is True


async def test_each_check_is_one_evaluation_result_event(fake_judge, spans):
    fake_judge.script("general_hallucination_check", score=2, explanation="A-17 was never mentioned")
    async with Reflector(ReflectionConfig(judge=fake_judge.config)) as reflector:
        await reflector.reflect(CALL, TOOLS, HISTORY)
    events = by_name(spans)["evaluate get_order"].events
    assert [e.name for e in events] == ["gen_ai.evaluation.result"] * (len(STATIC_CHECKS) + len(SEMANTIC_CHECKS))
    assert [e.attributes["gen_ai.evaluation.name"] for e in events] == [*STATIC_CHECKS, *SEMANTIC_CHECKS]
    hallucination = dict(events[len(STATIC_CHECKS)].attributes)
    assert hallucination == {
        "gen_ai.evaluation.name": "general_hallucination_check",
        "gen_ai.evaluation.score.value": 2.0,
        "gen_ai.evaluation.score.label": "failed",
        "gen_ai.evaluation.explanation": "A-17 was never mentioned",
    }
    assert dict(events[0].attributes)["gen_ai.evaluation.score.label"] == "passed"


async def test_a_failing_static_check_carries_its_findings_as_the_explanation(spans):
    async with Reflector() as reflector:
        await reflector.reflect({"name": "get_order", "arguments": {}}, TOOLS, HISTORY)
    events = {e.attributes["gen_ai.evaluation.name"]: e.attributes for e in by_name(spans)["evaluate get_order"].events}
    missing = events["missing_required_parameter"]
    assert missing["gen_ai.evaluation.score.value"] == 0.0 and "order_id" in missing["gen_ai.evaluation.explanation"]
    assert "chat fake-judge" not in by_name(spans)


async def test_a_gate_decision_and_its_shadow_decision_are_on_the_gate_span(fake_judge, spans):
    fake_judge.script("general_hallucination_check", score=1, explanation="invented")
    async with Gate(ReflectionConfig(judge=fake_judge.config), policy=GatePolicy(shadow=True)) as gate:
        await gate.check(CALL, TOOLS, HISTORY)
    found = by_name(spans)
    decision = found["gate get_order"]
    assert decision.attributes["reflection.gate.action"] == "allow"
    assert decision.attributes["reflection.gate.shadow_action"] == "reflect"
    assert decision.attributes["reflection.gate.reason"].startswith("shadow mode, would reflect")
    assert found["evaluate get_order"].parent.span_id == decision.context.span_id


async def test_a_failed_judge_request_is_an_error_span(fake_judge, spans):
    fake_judge.fail(500, times=10)
    async with Reflector(ReflectionConfig(judge=fake_judge.config)) as reflector:
        result = await reflector.reflect(CALL, TOOLS, HISTORY)
    chat = by_name(spans)["chat fake-judge"]
    assert result.overall_valid is None
    assert chat.status.status_code.name == "ERROR" and chat.events[0].name == "exception"
    errors = [e.attributes for e in by_name(spans)["evaluate get_order"].events if "error.type" in e.attributes]
    assert len(errors) == len(SEMANTIC_CHECKS)


def test_without_opentelemetry_installed_the_gate_works_and_records_nothing():
    # A fresh interpreter where importing opentelemetry fails, as when the extra is absent.
    code = """
import sys
sys.modules["opentelemetry"] = None
import reflection
from reflection import Gate, telemetry
tools = [{"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}]
with Gate() as gate:
    decision = gate.check_sync({"name": "f", "arguments": {"x": "1"}}, tools)
print(decision.action, telemetry._get_tracer(), telemetry._unavailable)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["modify", "None", "True"]


def test_importing_reflection_does_not_import_opentelemetry():
    code = "import sys, reflection; print(any(m.startswith('opentelemetry') for m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
