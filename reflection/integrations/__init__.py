"""Framework hooks: thin adapters from an agent framework's pre-execution hook to a `Gate`.

One module per framework, each importing its framework only inside itself (install the
matching extra):

- `reflection.integrations.openai_agents` (`toolcall-reflection[openai-agents]`): a tool input
  guardrail for the OpenAI Agents SDK.
- `reflection.integrations.langchain` (`toolcall-reflection[langchain]`): `wrap_tool_call` middleware
  for LangChain agents and a gated LangGraph `ToolNode`.
- `reflection.integrations.pydantic_ai` (`toolcall-reflection[pydantic-ai]`): a Pydantic AI capability.

Everywhere, `allow` runs the call, `modify` runs the verified correction where the framework
lets a hook change arguments (and says what changed in the call's result), `reflect` and `deny`
give the model the gate's feedback, unchanged, as the tool's result (nothing is raised), and
`escalate` stops for a human in the framework's own way; `approval_text(decision)` is the line
to show that person.

One of the four public subpackages (`reflection.batch`, `reflection.scoring`, `reflection.testing`
and `reflection.integrations`, see `reflection`): its public API is `__all__`.
"""

from reflection.integrations._common import EscalationRequired, approval_text

__all__ = ["EscalationRequired", "approval_text"]
