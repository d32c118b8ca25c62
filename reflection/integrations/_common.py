"""What every framework adapter shares: what runs for a decision (`applied`, from
`reflection.apply`), the text sent back to the model, the note on an applied correction, the
text a person reads on escalation, and escalation itself."""

from __future__ import annotations

from typing import Any

from reflection._own_words import NOTE_MARKER
from reflection._text import quoted, terminal_safe
from reflection.apply import Applied, apply_decision, runs_as_proposed_tool
from reflection.errors import ReflectionError
from reflection.gate import Decision

__all__ = [
    "NOTE_PREFIX",
    "Applied",
    "EscalationRequired",
    "applied",
    "approval_text",
    "blocked_text",
    "correction_note",
    "runs_as_proposed_tool",
    "single",
    "text_of",
]

_RESULT_LIMIT = 2000
_NAME_LIMIT = 80
_NOTE_ITEMS = 5
_NOTE_ITEM_LIMIT = 200
_REASON_LIMIT = 300

NOTE_PREFIX = NOTE_MARKER + " the call was corrected before it ran: "
"""How every correction note starts, so code reading a conversation back can recognise one."""


class EscalationRequired(ReflectionError):
    """The gate decided `escalate`: a person must approve or refuse the call before it runs.

    Raised by adapters whose framework has no approval step of its own; `decision` says why,
    and `str()` of the exception is `approval_text(decision)`, written for that person.
    """

    def __init__(self, decision: Decision):
        super().__init__(approval_text(decision))
        self.decision = decision


def blocked_text(decision: Decision) -> str:
    """What the model receives as the tool's result when the call is not run: the gate's
    feedback exactly as the gate wrote it (so the gate can recognise its own words when they
    come back in the conversation), else the reflection's feedback, else the reason."""
    if decision.feedback:
        return decision.feedback
    if decision.result is not None:
        text = decision.result.feedback(_RESULT_LIMIT)
        if text:
            return text
    return (
        f"The call to {quoted(decision.tool, _NAME_LIMIT, style='escaped', empty='')} was not run: "
        f"{terminal_safe(decision.reason, collapse=True, limit=_REASON_LIMIT)}."
    )


def approval_text(decision: Decision) -> str:
    """One line for the person asked to approve an escalated call: which call, and why the
    gate held it. Written for a person, not for the model (the feedback is the model's)."""
    return (
        f"The call to {quoted(decision.tool, _NAME_LIMIT, style='escaped', empty='')} is waiting for a person's approval: "
        f"{terminal_safe(decision.reason, collapse=True, limit=_REASON_LIMIT)}."
    )


def correction_note(decision: Decision) -> str | None:
    """For a `modify` decision, the short note saying what the gate changed before the call
    ran (each change quoted and bounded), else None."""
    if decision.action != "modify":
        return None
    notes = decision.result.static.correction_notes if decision.result is not None else ()
    changes = [terminal_safe(note, collapse=True, limit=_NOTE_ITEM_LIMIT) for note in notes]
    if not changes:  # a correction always names its changes; never let one pass unsaid
        return NOTE_PREFIX.removesuffix(": ") + "."
    if len(changes) > _NOTE_ITEMS:
        changes = [*changes[:_NOTE_ITEMS], f"and {len(changes) - _NOTE_ITEMS} more"]
    return NOTE_PREFIX + "; ".join(changes) + "."


def applied(decision: Decision, tool: str, *, corrects: bool = True) -> Applied:
    """What a hook runs for `decision` on a call to `tool`: the call as proposed, the correction
    (where the hook can pass corrected arguments, `corrects`), or nothing. A hook runs the tool the
    model picked, so a correction naming another tool runs nothing (`runs_as_proposed_tool`)."""
    return apply_decision(decision, tool=tool, corrects=corrects, renames=False)


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
