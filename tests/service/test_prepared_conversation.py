"""The gateway reads a request's conversation while the model works on it, and the gate takes it as read."""

from __future__ import annotations

import asyncio
import json

from reflection._own_words import remember
from reflection.config import GatePolicy
from reflection.formats import normalize_history, prepare_history
from reflection.gate import Gate
from reflection.model import History, Message
from reflection.reask import Said, Turn
from reflection.service._dialects import CHAT
from reflection.service._metrics import Metrics
from reflection.service._settle import Call, settle

TOOLS = json.dumps(
    [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
    ]
).encode()
MESSAGES = [
    {"role": "system", "content": "You are a weather assistant."},
    {"role": "user", "content": "What's the weather in Paris?"},
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def test_a_prepared_conversation_is_taken_as_read_and_equals_a_normalised_one():
    prepared = prepare_history(MESSAGES)
    assert normalize_history(prepared) is prepared
    assert prepared == normalize_history(MESSAGES)


def test_a_conversation_built_by_hand_is_still_read_through():
    remember("The gate's own words about an earlier call.")
    made = History(messages=(Message(role="user", content="The gate's own words about an earlier call."),))
    read = normalize_history(made)
    assert read is not made and read.messages[0].content != made.messages[0].content  # labelled, not evidence
    # Prepared from the same messages, the gate's words are handled when it is read, as ever.
    assert prepare_history([{"role": "user", "content": made.messages[0].content}]) == read


class _Recording(Gate):
    """A real gate that keeps the conversations it was given."""

    seen: list[object]

    async def check(self, call, tools, history=None, *, started=None):  # type: ignore[override]
        self.seen.append(history)
        return await super().check(call, tools, history, started=started)


def _call(gate: Gate) -> Call:
    body = {"model": "m", "messages": MESSAGES, "tools": TOOLS}
    metrics = Metrics().for_tenant("default")
    return Call(None, gate, metrics, 64, body, {}, [], None, None)  # type: ignore[arg-type]


def _settled(prepare: bool) -> tuple[list[object], History | None, Turn]:
    """What the gate was given when a valid call's turn was settled, the conversation prepared (or
    not, as when the request was never forwarded), and the turn."""

    async def run():
        gate = _Recording(policy=GatePolicy())
        gate.seen = []
        call = _call(gate)
        prepared = None
        if prepare:
            call.prepared = asyncio.ensure_future(call._prepare(CHAT))
            prepared = await call.prepared
        turn = await settle(call, CHAT, Said([CALL], {"role": "assistant", "tool_calls": [CALL]}), call.budget())
        return gate.seen, prepared, turn

    return asyncio.run(run())


def test_the_gate_reads_the_conversation_prepared_while_the_model_worked():
    seen, prepared, turn = _settled(prepare=True)
    assert isinstance(prepared, History) and prepared == normalize_history(MESSAGES)
    assert seen == [prepared] and seen[0] is prepared
    assert [d["action"] for d in turn.decisions] == ["allow"]


def test_without_a_prepared_conversation_the_gate_reads_the_request_as_before():
    seen, _, turn = _settled(prepare=False)
    assert seen == [MESSAGES]
    assert [d["action"] for d in turn.decisions] == ["allow"]


def test_a_conversation_that_cannot_be_prepared_is_read_again_where_its_error_belongs():
    async def run():
        gate = _Recording(policy=GatePolicy())
        gate.seen = []
        call = _call(gate)
        call.body["messages"] = 7  # not a conversation: the chat dialect reads it as none
        call.body["tools"] = object()  # not JSON: the gate refuses it when it checks
        return await call._prepare(CHAT)

    assert asyncio.run(run()) is None
