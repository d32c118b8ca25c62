"""OpenTelemetry spans for reflections, judge requests and gate decisions (`toolcall-reflection[otel]`).

Follows the OpenTelemetry GenAI semantic conventions: a `chat {model}` client span per judge
request (`gen_ai.operation.name`, `gen_ai.request.model`, `gen_ai.usage.input_tokens` /
`output_tokens`), an `evaluate {tool}` span per reflection carrying one `gen_ai.evaluation.result`
event per check (`gen_ai.evaluation.name`, `.score.value`, `.score.label`, `.explanation`),
and a `gate {tool}` span per gate decision (`reflection.gate.action`,
`reflection.gate.shadow_action`, `reflection.gate.reason`).

Spans go to the global tracer provider (`opentelemetry.trace.set_tracer_provider`) unless
`set_tracer_provider` here names another. Without `opentelemetry-api` installed every
function is a no-op, and with the API but no SDK the spans are OpenTelemetry's own no-ops.

It knows the objects it records only by the attributes it reads (the protocols below, which a
`JudgeConfig`, a `ReflectionResult` and a gate `Decision` satisfy; read-only, so a narrower
field type, a `Literal` or a model's dict, satisfies them), so every layer can record
spans without this module importing any of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

__all__ = [
    "gate_span",
    "judge_span",
    "record_completion",
    "record_decision",
    "record_result",
    "reflection_span",
    "set_tracer_provider",
]


class JudgeEndpoint(Protocol):
    """What `judge_span` reads of a judge's configuration (`JudgeConfig`)."""

    @property
    def model(self) -> str: ...
    @property
    def base_url(self) -> str: ...
    @property
    def max_completion_tokens(self) -> int: ...


class _Finding(Protocol):
    @property
    def message(self) -> str: ...


class _Check(Protocol):
    @property
    def passed(self) -> bool: ...
    @property
    def findings(self) -> Sequence[_Finding]: ...


class _Static(Protocol):
    @property
    def checks(self) -> Mapping[str, _Check]:
        """Every static check, in report order."""
        ...


class _Semantic(Protocol):
    @property
    def status(self) -> str: ...
    @property
    def score(self) -> int | None: ...
    @property
    def explanation(self) -> str: ...
    @property
    def error(self) -> str | None: ...


class _Usage(Protocol):
    @property
    def requests(self) -> int: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...
    @property
    def cost_usd(self) -> float | None: ...


class RecordedResult(Protocol):
    """What `record_result` reads of a reflection (`ReflectionResult`)."""

    @property
    def overall_valid(self) -> bool | None: ...
    @property
    def judge_skipped(self) -> str | None: ...
    @property
    def usage(self) -> _Usage: ...
    @property
    def static(self) -> _Static: ...
    @property
    def semantic(self) -> Mapping[str, _Semantic]: ...


class RecordedDecision(Protocol):
    """What `record_decision` reads of a gate decision (`Decision`)."""

    @property
    def action(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def shadow_action(self) -> str | None: ...
    @property
    def cost_usd(self) -> float | None: ...


_EXPLANATION_CHARS = 1000
_NULL: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
_tracer: Any = None
_trace: Any = None
_provider: Any = None
_unavailable = False


def set_tracer_provider(provider: Any | None) -> None:
    """Send reflection's spans to `provider` (an OpenTelemetry `TracerProvider`) instead of the
    global one; None goes back to the global provider."""
    global _tracer, _provider
    _provider, _tracer = provider, None


def _get_tracer() -> Any | None:
    global _tracer, _trace, _unavailable
    if _unavailable:
        return None
    if _trace is None:
        try:
            from opentelemetry import trace
        except ImportError:  # the extra is not installed: telemetry is off
            _unavailable = True
            return None
        _trace = trace
    if _provider is None and isinstance(
        _trace.get_tracer_provider(), (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider)
    ):
        # No SDK configured (yet): OpenTelemetry's own no-op spans would still cost ~15 µs a
        # decision in context switching, so make none. Checked per call: a provider may be set later.
        return None
    if _tracer is None:
        from reflection._version import __version__

        _tracer = _trace.get_tracer("reflection", __version__, tracer_provider=_provider)
    return _tracer


def _span(name: str, attributes: dict[str, Any], client: bool = False) -> contextlib.AbstractContextManager[Any]:
    tracer = _get_tracer()
    if tracer is None:
        return _NULL
    from opentelemetry.trace import SpanKind

    return tracer.start_as_current_span(
        name, kind=SpanKind.CLIENT if client else SpanKind.INTERNAL, attributes=attributes
    )


def reflection_span(tool: str, model: str | None = None) -> contextlib.AbstractContextManager[Any]:
    """The span of one reflection of a call to `tool` (None when telemetry is off)."""
    attributes: dict[str, Any] = {"gen_ai.operation.name": "evaluate", "gen_ai.tool.name": tool}
    if model is not None:
        attributes["gen_ai.request.model"] = model
    return _span(f"evaluate {tool}", attributes)


def judge_span(config: JudgeEndpoint) -> contextlib.AbstractContextManager[Any]:
    """The client span of one Chat Completions request to the judge."""
    if _get_tracer() is None:  # telemetry off: no attributes to build, no URL to parse, per request
        return _NULL
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": config.model,
        "gen_ai.request.temperature": 0.0,
        "gen_ai.request.max_tokens": config.max_completion_tokens,
    }
    with contextlib.suppress(ValueError):
        import httpx

        url = httpx.URL(config.base_url)
        attributes["server.address"] = url.host
        if url.port is not None:
            attributes["server.port"] = url.port
    return _span(f"chat {config.model}", attributes, client=True)


def gate_span(tool: str) -> contextlib.AbstractContextManager[Any]:
    """The span of one gate decision about a call to `tool`."""
    return _span(f"gate {tool}", {"gen_ai.operation.name": "evaluate", "gen_ai.tool.name": tool})


def record_completion(span: Any, completion: dict[str, Any]) -> None:
    """Token usage and response identity of a judge reply, on its `judge_span`."""
    if span is None or not span.is_recording():
        return
    usage = completion.get("usage")
    if isinstance(usage, dict):
        for key, attribute in (
            ("prompt_tokens", "gen_ai.usage.input_tokens"),
            ("completion_tokens", "gen_ai.usage.output_tokens"),
        ):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                span.set_attribute(attribute, value)
    for key, attribute in (("model", "gen_ai.response.model"), ("id", "gen_ai.response.id")):
        if isinstance(completion.get(key), str):
            span.set_attribute(attribute, completion[key])
    choices = completion.get("choices")
    if isinstance(choices, list):
        reasons = [
            c["finish_reason"] for c in choices if isinstance(c, dict) and isinstance(c.get("finish_reason"), str)
        ]
        if reasons:
            span.set_attribute("gen_ai.response.finish_reasons", reasons)


def record_result(span: Any, result: RecordedResult) -> None:
    """The verdict, judge usage and one `gen_ai.evaluation.result` event per check that ran."""
    if span is None or not span.is_recording():
        return
    if result.overall_valid is not None:
        span.set_attribute("reflection.overall_valid", result.overall_valid)
    if result.judge_skipped:
        span.set_attribute("reflection.judge_skipped", result.judge_skipped)
    usage = result.usage
    span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
    span.set_attribute("reflection.judge_requests", usage.requests)
    if usage.cost_usd is not None:  # no attribute when the price is unknown
        span.set_attribute("reflection.cost_usd", usage.cost_usd)
    for name, check in result.static.checks.items():
        event: dict[str, Any] = {
            "gen_ai.evaluation.name": name,
            "gen_ai.evaluation.score.value": 1.0 if check.passed else 0.0,
            "gen_ai.evaluation.score.label": "passed" if check.passed else "failed",
        }
        if check.findings:
            event["gen_ai.evaluation.explanation"] = "; ".join(f.message for f in check.findings)[:_EXPLANATION_CHARS]
        span.add_event("gen_ai.evaluation.result", event)
    for name, semantic in result.semantic.items():
        event = {"gen_ai.evaluation.name": name, "gen_ai.evaluation.score.label": semantic.status}
        if semantic.score is not None:
            event["gen_ai.evaluation.score.value"] = float(semantic.score)
        explanation = semantic.explanation or semantic.error
        if explanation:
            event["gen_ai.evaluation.explanation"] = explanation[:_EXPLANATION_CHARS]
        if semantic.status == "error":
            event["error.type"] = "judge_error"
        span.add_event("gen_ai.evaluation.result", event)


def record_decision(span: Any, decision: RecordedDecision) -> None:
    """The gate's action (and, in shadow mode, the action it would have taken)."""
    if span is None or not span.is_recording():
        return
    span.set_attribute("reflection.gate.action", decision.action)
    span.set_attribute("reflection.gate.reason", decision.reason)
    if decision.shadow_action is not None:
        span.set_attribute("reflection.gate.shadow_action", decision.shadow_action)
    if decision.cost_usd is not None:
        span.set_attribute("reflection.cost_usd", decision.cost_usd)
