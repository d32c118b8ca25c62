"""What every framework adapter shares: the text sent back to the model, and escalation."""

from __future__ import annotations

from typing import Any

from reflection.gate import Decision

_RESULT_LIMIT = 2000


class EscalationRequired(Exception):
    """The gate decided `escalate`: a person must approve or refuse the call before it runs.

    Raised by adapters whose framework has no approval step of its own; `decision` says why.
    """

    def __init__(self, decision: Decision):
        super().__init__(f"the call to {decision.tool} needs a person's approval: {decision.reason}")
        self.decision = decision


def blocked_text(decision: Decision) -> str:
    """What the model receives as the tool's result when the call is not run."""
    if decision.feedback:
        return decision.feedback
    if decision.result is not None:
        text = decision.result.feedback(_RESULT_LIMIT)
        if text:
            return text
    return f"The call to {decision.tool} was not run: {decision.reason}."


def single(decision: Decision | list[Decision]) -> Decision:
    """The decision for the one call an adapter asked about."""
    if isinstance(decision, list):  # pragma: no cover - adapters always pass one call
        raise TypeError("expected one decision for one call")
    return decision


def text_of(content: Any) -> str:
    """Plain text from a message content that is a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return "" if content is None else str(content)
