"""Applying a gate `Decision`: what runs, in every place that gates calls.

A decision's action says what the gate decided; `apply_decision` says what the caller does
with it, the same way for the gateway (`reflection.reask`), the MCP proxy, the LiteLLM
guardrail route and the framework hooks:

- `allow`: the proposed call runs.
- `modify`: the verified correction (`decision.call`, in the caller's shape) runs, where the
  caller can run a corrected call at all (`corrects`) and, when the correction names another
  tool, only where the caller can run another tool than the one proposed (`renames`: a hook
  runs the tool object the model picked, so there a rename is refused, never applied
  silently). Otherwise nothing runs and the model gets the gate's words.
- `reflect`: nothing runs; the model may be asked again with the feedback (`reask`).
- `deny`: nothing runs.
- `escalate`: nothing runs until a person approves (`escalate`).

The texts each caller writes (a tool result, a note, a `blocked_reason`) stay the caller's:
they are part of each caller's contract.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from reflection.gate import Decision

__all__ = ["Applied", "Runs", "apply_decision", "runs_as_proposed_tool"]

Runs = Literal["proposed", "corrected", "nothing"]


@dataclasses.dataclass(frozen=True, slots=True)
class Applied:
    """What comes of one decision for a caller."""

    decision: Decision
    runs: Runs
    """`proposed`: the call as the model proposed it; `corrected`: the gate's verified correction;
    `nothing`: no call runs (see `reask`, `escalate`)."""
    call: Any
    """The call that runs, in the caller's shape (the proposed call, or `decision.call` for a
    correction); None when nothing runs."""
    reask: bool = False
    """Nothing runs, and the model may be asked again with `text` (action `reflect`)."""
    escalate: bool = False
    """Nothing runs until a person approves the call (action `escalate`)."""

    @property
    def text(self) -> str:
        """What the gate says about a call that does not run as proposed: its feedback, else its reason."""
        return self.decision.feedback or self.decision.reason


def runs_as_proposed_tool(decision: Decision, name: str) -> bool:
    """False when a `modify` decision's call names another tool than `name`: a caller that runs
    the tool the model picked then refuses the call instead of running a tool the model did not call."""
    if decision.action != "modify" or decision.result is None or decision.result.static.correction is None:
        return True
    return decision.result.static.correction.name == name


def apply_decision(
    decision: Decision, proposed: Any = None, *, tool: str | None = None, corrects: bool = True, renames: bool = True
) -> Applied:
    """What runs for `decision` on the call `proposed`. `corrects`: the caller can run a corrected
    call (else a `modify` runs nothing); `renames`: it can run another tool than `tool`, the one
    proposed (else a correction naming another tool runs nothing)."""
    action = decision.action
    if action == "allow":
        return Applied(decision, "proposed", proposed)
    if (
        action == "modify"
        and corrects
        and (renames or runs_as_proposed_tool(decision, decision.tool if tool is None else tool))
    ):
        return Applied(decision, "corrected", decision.call)
    return Applied(decision, "nothing", None, reask=action == "reflect", escalate=action == "escalate")
