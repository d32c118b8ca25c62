"""LiteLLM's Generic Guardrail API (`POST /beta/litellm_basic_guardrail_api`), so a LiteLLM proxy
can call `reflection` as a guardrail (`guardrail: generic_guardrail_api`, `api_base` this service).

LiteLLM sends the texts, `tools` (the tool specs, with `input_type: "request"`), `tool_calls`
(OpenAI tool calls, in requests and responses) and `structured_messages` (the conversation, with
requests). Every tool call is gated against the tools with the messages as history: when every
decision is `allow` the answer is `NONE`; otherwise `BLOCKED`, with each refused call's feedback
as `blocked_reason` (LiteLLM cannot apply a corrected call, so `modify` blocks too and the
reason carries the correction). LiteLLM does not send tool specs with `input_type: "response"`;
give them as `additional_provider_specific_params.tools` in the guardrail's LiteLLM config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from reflection._json import dumps
from reflection._text import quoted
from reflection.apply import apply_decision
from reflection.service._metrics import TenantMetrics

if TYPE_CHECKING:
    from reflection.gate import Decision, Gate

__all__ = ["PATH", "GuardrailRequest", "GuardrailResponse", "apply"]

PATH = "/beta/litellm_basic_guardrail_api"


class GuardrailRequest(BaseModel):
    """The request LiteLLM sends (fields as in its Generic Guardrail API documentation)."""

    model_config = ConfigDict(extra="allow")
    texts: list[str] | None = None
    images: list[str] | None = None
    tools: list[dict[str, Any]] | None = Field(default=None, description="Tool specs (OpenAI ChatCompletionToolParam).")
    tool_calls: list[dict[str, Any]] | None = Field(default=None, description="OpenAI tool calls to check.")
    structured_messages: list[dict[str, Any]] | None = Field(
        default=None, description="The conversation (OpenAI messages)."
    )
    request_data: dict[str, Any] | None = None
    input_type: Literal["request", "response"] | None = None
    litellm_call_id: str | None = None
    litellm_trace_id: str | None = None
    additional_provider_specific_params: dict[str, Any] | None = Field(
        default=None, description="From the guardrail's LiteLLM config; `tools` here is used when the request has none."
    )


class GuardrailResponse(BaseModel):
    """The answer LiteLLM reads (`action`, `blocked_reason`, `texts`), plus `reflection`: the gate's decisions."""

    action: Literal["BLOCKED", "NONE", "GUARDRAIL_INTERVENED"]
    blocked_reason: str | None = None
    texts: list[str] | None = None
    reflection: dict[str, Any] = Field(default_factory=dict, description="actions and decisions, one per tool call.")


_NO_TOOLS_HINT = (
    "LiteLLM sends tool specs only with input_type 'request'; for response guardrails set "
    "additional_provider_specific_params.tools in the guardrail's LiteLLM config"
)


def _explain(decision: Decision) -> str:
    """One refused call, for LiteLLM's `blocked_reason`: what is wrong, and the correction once."""
    text = decision.feedback or decision.reason
    if decision.action == "modify":
        call = decision.call.get("function", decision.call) if isinstance(decision.call, dict) else decision.call
        text = f"{decision.reason}\nThe corrected call would be {dumps(call)}"
    return f"tool call {quoted(decision.tool)} ({decision.action}): {text}"


def _history(request: GuardrailRequest) -> list[dict[str, Any]] | None:
    """The conversation LiteLLM sent: `structured_messages` (pre_call), else the original
    request's `messages` when `request_data` carries them; None when it sent none (post_call
    today), so the checks that need a conversation are reported as not assessable."""
    if request.structured_messages:
        return request.structured_messages
    messages = (request.request_data or {}).get("messages")
    return messages if isinstance(messages, list) and messages else None


async def apply(
    gate: Gate, request: GuardrailRequest, metrics: TenantMetrics, *, started: float | None = None
) -> dict[str, Any]:
    """Gate the request's tool calls and answer in the Generic Guardrail API's shape (`started`:
    when the request arrived, for the gate's deadline). LiteLLM cannot run a corrected call, so
    only calls that run as proposed pass (`reflection.apply`)."""
    calls = request.tool_calls or []
    if not calls:
        return {"action": "NONE", "reflection": {"actions": [], "decisions": []}}
    params = request.additional_provider_specific_params or {}
    tools = request.tools if request.tools else params.get("tools")
    decided = await gate.check(list(calls), tools, _history(request), started=started)
    decisions = decided if isinstance(decided, list) else [decided]
    for decision in decisions:
        metrics.observe_decision(decision)
    refused = [d for d in decisions if apply_decision(d, corrects=False).runs != "proposed"]
    answer: dict[str, Any] = {
        "action": "BLOCKED" if refused else "NONE",
        "reflection": {
            "actions": [d.action for d in decisions],
            "decisions": [d.model_dump(mode="json") for d in decisions],
        },
    }
    if refused:
        reasons = [_explain(d) for d in refused]
        if not tools:
            reasons.append(_NO_TOOLS_HINT)
        answer["blocked_reason"] = "\n".join(reasons)
    return answer
