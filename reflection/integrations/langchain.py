"""LangChain and LangGraph: `wrap_tool_call` middleware and a gated `ToolNode`
(`pip install 'toolcall-reflection[langchain]'`).

    from langchain.agents import create_agent
    from reflection.integrations.langchain import ReflectionMiddleware, reflection_tool_node

    agent = create_agent(model, tools, middleware=[ReflectionMiddleware(gate, tools=tools)])
    node = reflection_tool_node(tools, gate)          # in your own LangGraph graph

The gate sees the call, the tools (the middleware's `tools=`, else only the called tool), and
the conversation in the graph state's `messages` up to the model turn that made the call.

- `allow`: the tool runs. `modify`: the tool runs with the verified correction, and its
  `ToolMessage` ends with a note saying what changed ("Note from reflection: the call was
  corrected before it ran: ..."), for the model and the application alike.
- `reflect`, `deny`: the tool does not run; the model gets a `ToolMessage` (status `error`)
  holding the gate's feedback exactly as the gate wrote it, and the agent goes on.
- `escalate`: raises `reflection.integrations.EscalationRequired` carrying the `Decision`.

Sync graphs (`invoke`) use `Gate.check_sync`; async ones (`ainvoke`) `Gate.check`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, convert_to_openai_messages
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from reflection.gate import Decision, Gate
from reflection.integrations._common import (
    EscalationRequired,
    applied,
    blocked_text,
    correction_note,
    single,
)

__all__ = ["ReflectionMiddleware", "reflection_tool_node"]

Handler = Callable[[ToolCallRequest], Any]


class ReflectionMiddleware(AgentMiddleware):
    """Agent middleware that asks a `Gate` about each tool call before it runs.

    Pass the agent's `tools` so the judge can weigh the called tool against the others
    (without them it sees only the called tool).
    """

    def __init__(self, gate: Gate, *, tools: Sequence[Any] | None = None):
        super().__init__()
        self.gate = gate
        self.specs = tool_specs(tools) if tools is not None else None

    def wrap_tool_call(self, request: ToolCallRequest, handler: Handler) -> Any:
        """Decide with `Gate.check_sync`, then run, rewrite or answer the call."""
        return _sync_wrapper(self.gate, self.specs)(request, handler)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> Any:
        """Decide with `Gate.check`, then run, rewrite or answer the call."""
        return await _async_wrapper(self.gate, self.specs)(request, handler)


def reflection_tool_node(tools: Sequence[Any], gate: Gate, **kwargs: Any) -> ToolNode:
    """LangGraph's prebuilt `ToolNode` over `tools`, with every call decided by `gate` first.
    Other keyword arguments go to `ToolNode`."""
    specs = tool_specs(tools)
    return ToolNode(
        tools, wrap_tool_call=_sync_wrapper(gate, specs), awrap_tool_call=_async_wrapper(gate, specs), **kwargs
    )


def tool_specs(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """OpenAI tool specs for LangChain tools (or anything `convert_to_openai_tool` reads)."""
    return [convert_to_openai_tool(tool) for tool in tools]


def _sync_wrapper(gate: Gate, specs: list[dict[str, Any]] | None) -> Callable[[ToolCallRequest, Handler], Any]:
    def wrap(request: ToolCallRequest, execute: Handler) -> Any:
        decision = single(gate.check_sync(*_question(request, specs)))
        outcome = _outcome(decision, request)
        if not isinstance(outcome, ToolCallRequest):
            return outcome
        return _noted(execute(outcome), correction_note(decision), request.tool_call.get("id"))

    return wrap


def _async_wrapper(gate: Gate, specs: list[dict[str, Any]] | None) -> Callable[[ToolCallRequest, Any], Awaitable[Any]]:
    async def wrap(request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[Any]]) -> Any:
        decision = single(await gate.check(*_question(request, specs)))
        outcome = _outcome(decision, request)
        if not isinstance(outcome, ToolCallRequest):
            return outcome
        return _noted(await execute(outcome), correction_note(decision), request.tool_call.get("id"))

    return wrap


def _question(request: ToolCallRequest, specs: list[dict[str, Any]] | None) -> tuple[Any, Any, Any]:
    """(call, tools, history) for the gate."""
    call = request.tool_call
    if specs is None:
        specs = tool_specs([request.tool]) if isinstance(request.tool, BaseTool) else []
    return dict(call), specs, _history(_messages(request.state), call.get("id"))


def _outcome(decision: Decision, request: ToolCallRequest) -> ToolCallRequest | ToolMessage:
    """The request to run (the original, or the correction) or the answer in its place."""
    call = request.tool_call
    outcome = applied(decision, call.get("name") or "")
    if outcome.runs == "proposed":
        return request
    if outcome.runs == "corrected":
        return request.override(tool_call={**call, "args": outcome.call["args"]})
    if outcome.escalate:
        raise EscalationRequired(decision)
    return ToolMessage(
        content=blocked_text(decision), tool_call_id=call.get("id") or "", name=call.get("name"), status="error"
    )


def _noted(result: Any, note: str | None, call_id: str | None) -> Any:
    """The tool's answer with the correction note added to its `ToolMessage` (in a `Command`,
    the one answering this call); anything else is returned as it is."""
    if note is None:
        return result
    if isinstance(result, ToolMessage):
        return result.model_copy(update={"content": _with_note(result.content, note)})
    if (
        isinstance(result, Command)
        and isinstance(result.update, dict)
        and isinstance(result.update.get("messages"), list)
    ):
        messages = [
            m.model_copy(update={"content": _with_note(m.content, note)})
            if isinstance(m, ToolMessage) and m.tool_call_id == call_id
            else m
            for m in result.update["messages"]
        ]
        return dataclasses.replace(result, update={**result.update, "messages": messages})
    return result


def _with_note(content: str | list[Any], note: str) -> str | list[Any]:
    if isinstance(content, list):  # content blocks: the note is one more text block
        return [*content, {"type": "text", "text": note}]
    return f"{content}\n\n{note}" if content else note


def _messages(state: Any) -> list[BaseMessage]:
    if isinstance(state, dict):
        state = state.get("messages", [])
    elif not isinstance(state, list):
        state = getattr(state, "messages", [])
    return [m for m in state if isinstance(m, BaseMessage)]


def _history(messages: list[BaseMessage], call_id: str | None) -> list[dict[str, Any]]:
    """The conversation before the model turn that proposed the call, as OpenAI chat messages."""
    for i, message in enumerate(messages):
        if isinstance(message, AIMessage) and any(c.get("id") == call_id for c in message.tool_calls):
            messages = messages[:i]
            break
    return list(convert_to_openai_messages(messages)) if messages else []
