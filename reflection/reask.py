"""The bounded re-ask rounds: one model turn's calls gated, what was refused sent back to the
model, its new calls gated in turn, until nothing is refused or the rounds run out.

Shape-neutral: where the calls sit in a reply, how a call is written back and how the model is
asked again are the caller's (`Shape`, `Ask`: the gateway has one per API it speaks). What is
here is the policy, the same for every API:

- Each decision is applied by `reflection.apply.apply_decision`: accepted calls (`allow`, and
  `modify` with the verified correction) go to the client, each call once (a call the model
  proposes again after it was accepted is not added twice) and each under its own id; `deny`
  removes the call and says so; `escalate` removes it and lists it for a person.
- Width: one re-ask per round for every refused call of the turn together, showing the model its
  whole turn (which calls were accepted, which refused and why). At most `Budget.max_calls`
  calls per model turn (`TooManyCalls` past it).
- Depth: at most `gate.max_reflect_rounds` rounds per turn, and that many re-asks per client
  request in all (`Budget`, shared by the turns of one request, e.g. the choices of a reply).
- Fallback: a call still refused when the rounds run out gets `gate.reflect_fallback` (deny or
  escalate). A model that answers a re-ask in words instead of a new call ends the rounds; its
  refused calls stay refused (`reflect` in the record) and its words go to the client.

Every line written here for the model or the client is remembered as the gate's own words
(`reflection._own_words`), so it never counts as evidence when it comes back in a conversation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from reflection._own_words import remember
from reflection._text import plain_line, quoted
from reflection.apply import Applied, apply_decision

if TYPE_CHECKING:
    from reflection.config import GatePolicy
    from reflection.gate import Decision

__all__ = [
    "Ask",
    "Budget",
    "Check",
    "Reply",
    "Said",
    "Shape",
    "TooManyCalls",
    "Turn",
    "decision_entry",
    "note",
    "report",
    "settle",
]


class TooManyCalls(Exception):
    """A model turn holds more calls than a turn may carry: none of them is passed on."""

    def __init__(self, count: int, limit: int):
        super().__init__(f"{count} tool calls, more than the {limit} a reply may carry")
        self.count = count
        self.limit = limit


@dataclasses.dataclass
class Said:
    """One model turn as read: the calls to gate, the whole turn in the API's shape (for a re-ask:
    the model sees what it said), its text, and the types of the call-like items that cannot be
    checked (removed, and said so)."""

    calls: list[Any]
    turn: Any = None
    text: str | None = None
    removed: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Turn:
    """The settling of one model turn's calls: what the client gets and the record of how."""

    calls: list[Any] = dataclasses.field(default_factory=list)
    """Calls to send to the client, in order, each once."""
    applied: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    """Lines for the message content: removed calls, or the model's own words after a re-ask."""
    escalated: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    decisions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    rounds: int = 0
    usage: list[Any] = dataclasses.field(default_factory=list)
    """The upstream usage of each re-ask."""
    reply_id: Any = None
    """The id of the last re-ask's reply (the Responses API keeps the conversation under it)."""


@dataclasses.dataclass(frozen=True)
class Reply:
    """The model's answer to a re-ask: its turn, the usage it reports and its id."""

    said: Said
    usage: Any = None
    id: Any = None


class Budget:
    """The re-ask bounds of one client request: `policy.max_reflect_rounds` rounds per turn and
    re-asks in all (`left`, spent by every turn of the request), `policy.reflect_fallback`, and
    at most `max_calls` calls per model turn."""

    def __init__(self, policy: GatePolicy, max_calls: int):
        self.depth = policy.max_reflect_rounds
        self.left = policy.max_reflect_rounds
        self.fallback = policy.reflect_fallback
        self.max_calls = max_calls


class Shape(Protocol):
    """What the rounds need to know of the calls' shape."""

    def call_id(self, call: Any) -> Any:
        """The id a result refers the call by."""

    def with_id(self, call: dict[str, Any], call_id: str) -> dict[str, Any]:
        """`call` under another id (one id per call in a final reply)."""

    def corrected(self, corrected: Any, original: Any) -> Any:
        """The gate's verified correction written as the original call is, keeping its ids."""

    def identity(self, call: Any) -> bytes:
        """What makes two calls the same call: the tool and its arguments as read."""


Check = Callable[[list[Any]], Awaitable[list["Decision"]]]
"""Gate these calls (one turn's, together) with the conversation as it stands."""
Ask = Callable[[Said, list[Any], list[str], int], Awaitable[Reply]]
"""Ask the model again: its turn (`Said`), the calls gated, one text per call saying what became
of it, and the round; the model's new turn."""


def note(text: str) -> str:
    """A line written into a conversation or a reply: remembered, so it never counts as evidence."""
    remember(text)
    return text


def decision_entry(decision: Decision, round_: int, call_id: Any) -> dict[str, Any]:
    """One decision as the `reflection` report lists it."""
    return {
        "round": round_,
        "tool": decision.tool,
        "call_id": call_id,
        "action": decision.action,
        "reason": decision.reason,
        "feedback": decision.feedback,
        "shadow_action": decision.shadow_action,
    }


def report(turns: list[Turn]) -> dict[str, Any]:
    """The `reflection` report of a client request's turns."""
    return {
        "actions": [a for t in turns for a in t.applied],
        "rounds": sum(t.rounds for t in turns),
        "decisions": [d for t in turns for d in t.decisions],
        "escalated": [e for t in turns for e in t.escalated],
        "reask_usage": [u for t in turns for u in t.usage],
    }


async def settle(
    said: Said, check: Check, ask: Ask, shape: Shape, budget: Budget, observe: Callable[[Decision], None] | None = None
) -> Turn:
    """Gate one model turn's calls (`said`), asking the model again (once per round, for every
    refused call together, shown its whole turn) while the rounds last; what the caller passes on
    and how it came to be. `observe` sees every decision. Raises `TooManyCalls` for a turn (the
    first or a re-ask's) with more calls than `budget.max_calls`."""
    turn = Turn()
    seen: set[bytes] = set()
    ids: set[Any] = set()
    round_ = 0
    while True:
        if len(said.calls) > budget.max_calls:
            raise TooManyCalls(len(said.calls), budget.max_calls)
        _removed(said, turn)
        pending = said.calls
        decisions = await check(list(pending)) if pending else []
        refused: list[tuple[Any, Decision]] = []
        results: list[Callable[[], str]] = []
        for call, decision in zip(pending, decisions, strict=True):
            if observe is not None:
                observe(decision)
            turn.decisions.append(decision_entry(decision, round_, shape.call_id(call)))
            applied = apply_decision(decision, call)
            results.append(_outcome(shape, call, applied, turn, seen, ids))
            if applied.reask:
                refused.append((call, decision))
        if not refused:
            return turn
        if round_ >= budget.depth or budget.left <= 0:
            for call, decision in refused:
                _fallback(budget, call, decision, turn)
            return turn
        budget.left -= 1
        round_ += 1
        turn.rounds += 1
        # The model sees its whole turn: every call it made, and what became of each. The lines
        # are remembered only now that they go into a conversation.
        texts = [result() for result in results]
        for text in texts:
            remember(text)
        reply = await ask(said, pending, texts, round_)
        turn.usage.append(reply.usage)
        turn.reply_id = reply.id
        said = reply.said
        if not said.calls:
            # The model answered in words instead (e.g. asking the user for a missing value).
            _removed(said, turn)
            for call, decision in refused:
                turn.applied.append("reflect")
                turn.decisions.append(
                    {
                        **decision_entry(decision, round_, shape.call_id(call)),
                        "action": "reflect",
                        "reason": "the model answered in words instead of a new call",
                    }
                )
            if said.text:
                turn.notes.append(said.text)
            return turn


def _removed(said: Said, turn: Turn) -> None:
    """Record the call-like items of a turn that cannot be checked: they are not passed on."""
    for kind in said.removed:
        turn.applied.append("deny")
        turn.notes.append(note(f"A {quoted(kind)} item the gateway cannot check was removed and will not run."))
    said.removed = []


def _outcome(
    shape: Shape, call: Any, applied: Applied, turn: Turn, seen: set[bytes], ids: set[Any]
) -> Callable[[], str]:
    """Apply one decision to `turn`; the text the model reads about it if it is asked again
    (made only then: most turns are never re-asked)."""
    decision = applied.decision
    if applied.runs != "nothing":
        sent = call if applied.runs == "proposed" else shape.corrected(applied.call, call)
        if turn.calls:  # the first call of a turn cannot repeat one: its key is made when a second comes
            if not seen:
                seen.update(shape.identity(kept) for kept in turn.calls)
            key = shape.identity(sent)
            if key in seen:  # the model proposed a call it already has: keep the first
                return lambda: f"The call to {quoted(decision.tool)} was already accepted; do not propose it again."
            seen.add(key)
        if isinstance(sent, dict) and shape.call_id(sent) in ids:  # one id per call in the final reply
            sent = shape.with_id(sent, f"{shape.call_id(sent)}_{len(turn.calls)}")
        if isinstance(sent, dict):
            ids.add(shape.call_id(sent))
        turn.calls.append(sent)
        turn.applied.append(decision.action)
        return lambda: (
            f"The call to {quoted(decision.tool)} was accepted and will run when this turn ends; "
            "do not propose it again."
        )
    if applied.escalate:
        _escalate(call, decision, turn)
        return lambda: (
            f"The call to {quoted(decision.tool)} is waiting for a person's approval; do not propose it again."
        )
    if not applied.reask:
        _deny(decision, turn)
        return lambda: f"The call to {quoted(decision.tool)} was blocked and will not run."
    return lambda: applied.text


def _fallback(budget: Budget, call: Any, decision: Decision, turn: Turn) -> None:
    if budget.fallback == "escalate":
        _escalate(call, decision, turn)
    else:
        _deny(decision, turn)


def _escalate(call: Any, decision: Decision, turn: Turn) -> None:
    turn.applied.append("escalate")
    turn.escalated.append({"call": call, "feedback": decision.feedback, "reason": decision.reason})
    turn.notes.append(
        note(f"The call to {quoted(decision.tool)} is waiting for a person's approval ({plain_line(decision.reason)}).")
    )


def _deny(decision: Decision, turn: Turn) -> None:
    turn.applied.append("deny")
    turn.notes.append(
        note(f"The call to {quoted(decision.tool)} was blocked by reflection ({plain_line(decision.reason)}).")
    )
