"""OpenAI Agents SDK: a tool input guardrail built from a `Gate` (`pip install 'toolcall-reflection[openai-agents]'`).

    from agents import Agent, function_tool
    from reflection.integrations.openai_agents import guard_tools

    agent = Agent(name="support", tools=guard_tools([refund_order, get_order], gate))

The SDK runs the guardrail before each function tool. The gate sees the call, the agent's
function tools as specs, and the conversation: the agent's instructions (when a string) and
the run's input (`ToolContext.turn_input`; calls made earlier within the same `Runner.run` are
not part of it, the SDK gives guardrails no other view of the conversation).

- `allow`: the tool runs.
- `reflect`, `deny`: the tool does not run; the gate's feedback, exactly as the gate wrote it,
  is the tool's result for the model (`reject_content`), and the run goes on.
- `modify`: the SDK's guardrails cannot change arguments, so the tool does not run and the
  model gets the feedback naming the verified correction, to call again with it: no
  correction ever runs unseen.
- `escalate`: the guardrail trips (`raise_exception`): `Runner.run` raises the SDK's
  `ToolInputGuardrailTripwireTriggered`, whose `.output.output_info` is the `Decision`;
  `reflection.integrations.approval_text(decision)` is the line to show the person who decides.

The guardrail's `output_info` is always the `Decision`; `RunResult.tool_input_guardrail_results`
lists them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from typing import Any

from agents import Agent, FunctionTool
from agents.tool_guardrails import ToolGuardrailFunctionOutput, ToolInputGuardrail, ToolInputGuardrailData

from reflection.gate import Gate
from reflection.integrations._common import applied, blocked_text, single, text_of

__all__ = ["guard_tools", "reflection_guardrail"]


def reflection_guardrail(gate: Gate, *, name: str = "reflection_gate") -> ToolInputGuardrail[Any]:
    """A tool input guardrail that asks `gate` about each call before the tool runs.

    Attach it to function tools with `tool_input_guardrails=[...]` (or use `guard_tools`).
    """

    async def check(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        context = data.context
        call = {
            "id": context.tool_call_id,
            "type": "function",
            "function": {"name": context.tool_name, "arguments": context.tool_arguments},
        }
        decision = single(await gate.check(call, _tool_specs(data.agent), _history(data.agent, context.turn_input)))
        # A tool input guardrail cannot change the arguments: a correction is refused with its words.
        outcome = applied(decision, context.tool_name, corrects=False)
        if outcome.runs == "proposed":
            return ToolGuardrailFunctionOutput.allow(output_info=decision)
        if outcome.escalate:
            return ToolGuardrailFunctionOutput.raise_exception(output_info=decision)
        return ToolGuardrailFunctionOutput.reject_content(blocked_text(decision), output_info=decision)

    return ToolInputGuardrail(guardrail_function=check, name=name)


def guard_tools(tools: Iterable[Any], gate: Gate, *, name: str = "reflection_gate") -> list[Any]:
    """Copies of `tools` with the gate's guardrail added to every `FunctionTool` (after any
    guardrails it already has); other tools are returned unchanged."""
    guardrail = reflection_guardrail(gate, name=name)
    out = []
    for tool in tools:
        if isinstance(tool, FunctionTool):
            tool = dataclasses.replace(tool, tool_input_guardrails=[*(tool.tool_input_guardrails or []), guardrail])
        out.append(tool)
    return out


def _tool_specs(agent: Agent[Any]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.params_json_schema},
        }
        for tool in agent.tools
        if isinstance(tool, FunctionTool)
    ]


def _history(agent: Agent[Any], items: Sequence[Any]) -> list[dict[str, Any]]:
    """Chat messages from the agent's instructions and the run's Responses-API input items."""
    messages: list[dict[str, Any]] = []
    if isinstance(agent.instructions, str) and agent.instructions:
        messages.append({"role": "system", "content": agent.instructions})
    for item in items:
        item = item.model_dump(exclude_unset=True) if hasattr(item, "model_dump") else item
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") in ("user", "assistant", "system", "developer"):
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": text_of(item.get("content"))})
        elif kind == "function_call":
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": item.get("call_id"),
                            "type": "function",
                            "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"},
                        }
                    ],
                }
            )
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": output if isinstance(output, str) else json.dumps(output, default=str),
                }
            )
    return messages
