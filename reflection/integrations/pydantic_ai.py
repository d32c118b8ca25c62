"""Pydantic AI: a capability that asks a `Gate` about each tool call (`pip install 'toolcall-reflection[pydantic-ai]'`).

    from pydantic_ai import Agent
    from reflection.integrations.pydantic_ai import ReflectionCapability

    agent = Agent(model, tools=[refund_order], capabilities=[ReflectionCapability(gate)])

The gate decides on the model's raw arguments before Pydantic AI validates them, seeing every
tool of the run step and the run's messages up to the model turn that made the call.

- `allow`: validation and the tool run as usual.
- `modify`: the verified correction is validated and run in place of the model's arguments.
  The change is recorded in Pydantic AI's channel for the application, the tool return's
  metadata (`ToolReturnPart.metadata`): `"reflection"` holds the `Decision` as JSON and
  `"message"` the note saying what changed. The model sees the tool's result unchanged.
- `reflect`, `deny`: validation and the tool are skipped; the gate's feedback, exactly as the
  gate wrote it, is the tool's result for the model, and the run goes on (no retry is spent).
- `escalate`: validation and the tool are skipped and the call is deferred for a person
  (`ApprovalRequired`, the framework's own human-in-the-loop step) with its arguments as the
  model sent them, valid or not: give the agent `output_type=[str, DeferredToolRequests]`. The
  deferral's metadata holds the `Decision` as JSON under `"reflection"` and a line for the
  person under `"message"`. Resume with `DeferredToolResults`: an approved call is not gated
  again, but Pydantic AI validates its arguments (approve with `ToolApproved(override_args=...)`
  to fix them); a denied call answers the model with the denial's message.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired, SkipToolValidation
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.tools import ToolDefinition

from reflection.gate import Decision, Gate
from reflection.integrations._common import (
    applied,
    approval_text,
    blocked_text,
    correction_note,
    single,
    text_of,
)

__all__ = ["ReflectionCapability"]


@dataclass(init=False)
class ReflectionCapability(AbstractCapability[Any]):
    """Gates every function tool call of the agent it is given to."""

    gate: Gate
    _held: dict[str, Decision] = field(default_factory=dict, repr=False)
    """This run's calls the gate did not run as proposed (held or corrected), by tool call id,
    from validation to execution."""

    def __init__(self, gate: Gate):
        self.gate = gate
        self._held = {}

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not built from an agent spec: it needs a live `Gate`."""
        return None

    async def for_run(self, ctx: RunContext[Any]) -> ReflectionCapability:
        """A fresh instance per run, so held decisions never cross runs."""
        return ReflectionCapability(self.gate)

    async def wrap_tool_validate(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: Any, handler: Any
    ) -> dict[str, Any]:
        """Decide on the raw arguments: validate them, validate the correction, or hold the call."""
        if ctx.tool_call_approved:  # a person approved this call after an escalation
            return await handler(args)
        raw = {"id": call.tool_call_id, "name": call.tool_name, "arguments": _raw_arguments(call)}
        decision = single(
            await self.gate.check(raw, _tool_specs(ctx, tool_def), _history(ctx.messages, call.tool_call_id))
        )
        outcome = applied(decision, call.tool_name)
        if outcome.runs == "proposed":
            return await handler(args)
        if outcome.runs == "corrected":
            validated = await handler(outcome.call["arguments"])
            self._held[call.tool_call_id] = decision
            return validated
        self._held[call.tool_call_id] = decision
        # The tool will not run now: nothing to validate. An escalated call goes to a person as
        # the model sent it; Pydantic AI validates it if the person approves it.
        raise SkipToolValidation(call.args_as_dict())

    async def wrap_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any], handler: Any
    ) -> Any:
        """Run the tool (noting an applied correction), or answer in its place for a held call."""
        decision = self._held.pop(call.tool_call_id, None)
        if decision is None:
            return await handler(args)
        outcome = applied(decision, call.tool_name)
        if outcome.escalate:
            raise ApprovalRequired(metadata=_metadata(decision, approval_text(decision)))
        note = correction_note(decision) if outcome.runs == "corrected" else None
        if note is None:  # reflect, deny, or a correction naming another tool
            return blocked_text(decision)
        return _with_metadata(await handler(args), _metadata(decision, note))


def _raw_arguments(call: ToolCallPart) -> Any:
    """The arguments as the model sent them: JSON text stays text, so the gate reports text that
    does not parse instead of Pydantic AI's `{"INVALID_JSON": ...}` stand-in."""
    return call.args if isinstance(call.args, str) and call.args.strip() else call.args_as_dict()


def _metadata(decision: Decision, message: str) -> dict[str, Any]:
    return {"reflection": decision.model_dump(mode="json"), "message": message}


def _with_metadata(result: Any, metadata: dict[str, Any]) -> ToolReturn[Any]:
    """The tool's result with `metadata` for the application (never sent to the model)."""
    if not isinstance(result, ToolReturn):
        return ToolReturn(return_value=result, metadata=metadata)
    if result.metadata is None or isinstance(result.metadata, dict):  # keep the tool's own metadata
        return replace(result, metadata={**(result.metadata or {}), **metadata})
    return replace(result, metadata={**metadata, "tool": result.metadata})


def _tool_specs(ctx: RunContext[Any], called: ToolDefinition) -> list[dict[str, Any]]:
    tools = ctx.tool_manager.tools if ctx.tool_manager is not None else None
    definitions = [tool.tool_def for tool in tools.values()] if tools else [called]
    return [
        {
            "type": "function",
            "function": {"name": d.name, "description": d.description or "", "parameters": d.parameters_json_schema},
        }
        for d in definitions
    ]


def _history(messages: list[ModelMessage], call_id: str) -> list[dict[str, Any]]:
    """OpenAI chat messages for the run's messages before the model turn that proposed the call."""
    out: list[dict[str, Any]] = []
    instructions_seen = False
    for message in messages:
        if isinstance(message, ModelResponse):
            if any(isinstance(p, ToolCallPart) and p.tool_call_id == call_id for p in message.parts):
                break
            text = "\n".join(p.content for p in message.parts if isinstance(p, TextPart))
            calls = [
                {
                    "id": p.tool_call_id,
                    "type": "function",
                    "function": {"name": p.tool_name, "arguments": p.args_as_json_str()},
                }
                for p in message.parts
                if isinstance(p, ToolCallPart)
            ]
            out.append({"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})})
            continue
        if not isinstance(message, ModelRequest):
            continue
        if message.instructions and not instructions_seen:
            instructions_seen = True
            out.append({"role": "system", "content": message.instructions})
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                out.append({"role": "system", "content": part.content})
            elif isinstance(part, UserPromptPart):
                out.append({"role": "user", "content": text_of(part.content)})
            elif isinstance(part, ToolReturnPart):
                out.append({"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response_str()})
            elif isinstance(part, RetryPromptPart):
                role = "tool" if part.tool_name else "user"
                entry = {"role": role, "content": part.model_response()}
                out.append({**entry, "tool_call_id": part.tool_call_id} if role == "tool" else entry)
    return out
