"""One client request to the gateway, and the settling of its model turns: the service side of
`reflection.reask`, below every API module (`gateway`, `_responses`, `_anthropic`).

`settle` runs the shape-neutral re-ask rounds with the gate, the API's `Dialect` and the upstream
client: the gate reads the request's conversation as the dialect gives it, a re-ask is the
client's request with the extended conversation POSTed to the dialect's endpoint, and a turn with
more calls than a reply may carry is refused (502) whole.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
from starlette.responses import Response, StreamingResponse

from reflection import reask
from reflection.formats import normalize_tools, prepare_history
from reflection.model import History
from reflection.reask import Budget, Reply, Said, TooManyCalls, Turn
from reflection.service._dialects import Dialect, Refused, reply_bytes
from reflection.service._metrics import TenantMetrics
from reflection.service._upstream import UpstreamClient, add_usage, downstream

if TYPE_CHECKING:
    from reflection.gate import Decision, Gate

__all__ = ["Call", "answered", "report_headers", "settle", "streamed"]


@dataclasses.dataclass
class Call:
    """One client request being answered: what the API modules need to answer it."""

    client: UpstreamClient
    gate: Gate
    metrics: TenantMetrics
    max_calls: int
    """The most calls one model turn may carry."""
    body: dict[str, Any]
    """The request's JSON, `tools` kept as JSON text."""
    headers: dict[str, str]
    """The headers for the upstream."""
    secrets: list[bytes]
    """The keys in play, redacted from anything the upstream says."""
    started: float | None
    deadline: float | None
    owner: bytes = b""
    """Who made the request (a digest of its credentials), so one client's stored turns are never another's."""
    prepared: asyncio.Future[History | None] | None = None
    """The request's conversation as the gate reads it, read while the upstream works (`forward`)."""

    def budget(self) -> Budget:
        """The re-ask bounds for this request (`gate.max_reflect_rounds`, `gate.reflect_fallback`)."""
        return Budget(self.gate.policy, self.max_calls)

    async def forward(self, dialect: Dialect, raw: bytes) -> aiohttp.ClientResponse | Response:
        """Send the request (`raw`) to `dialect`'s upstream endpoint (see `UpstreamClient.forward`),
        and read its tools and conversation for the gate while the model answers: that work is
        then off the answer's path (the conversation's grows with its length, and a tool list
        the gate has not seen is compiled)."""
        self.prepared = asyncio.ensure_future(self._prepare(dialect))
        return await self.client.forward(self.client.url_for(dialect), raw, self.headers, self.secrets)

    async def _prepare(self, dialect: Dialect) -> History | None:
        # One turn of the loop first: the upstream client writes the request on the next turn.
        await asyncio.sleep(0)
        try:
            normalize_tools(dialect.specs(self.body))
            return prepare_history(dialect.history(self.body, dialect.conversation(self.body)))
        except Exception:  # noqa: BLE001 - read again by `settle`, which raises it where it belongs
            return None


async def settle(call: Call, dialect: Dialect, said: Said, budget: Budget) -> Turn:
    """Gate one model turn's calls (`said`) in `dialect`'s shapes, re-asking the model while the
    rounds last (see `reflection.reask`); `budget` is the request's, shared by its turns. Raises
    `Refused` with what the client gets instead when an answer cannot be passed on."""
    tools = dialect.specs(call.body)
    conversation = dialect.conversation(call.body)
    prepared = await call.prepared if call.prepared is not None else None  # the request's conversation

    async def check(calls: list[Any]) -> list[Decision]:
        history = prepared if prepared is not None else dialect.history(call.body, conversation)
        decided = await call.gate.check(calls, tools, history, started=call.started)
        return decided if isinstance(decided, list) else [decided]

    async def ask(turn: Said, calls: list[Any], results: list[str], round_: int) -> Reply:
        nonlocal conversation, prepared
        conversation, _ = dialect.extend(conversation, turn, calls, results, round_)
        prepared = None  # the conversation now has the re-ask's turns
        reply = await call.client.post(
            call.client.url_for(dialect),
            reply_bytes(dialect.reask(call.body, conversation)),
            call.headers,
            call.secrets,
        )
        usage, reply_id = reply.get("usage"), reply.get("id")
        return Reply(dialect.said(reply), usage, reply_id)

    try:
        return await reask.settle(said, check, ask, dialect, budget, call.metrics.observe_decision)
    except TooManyCalls as exc:
        raise Refused(
            call.client.failed(
                "too_many_calls",
                502,
                f"the upstream's answer has {exc.count} tool calls, more than the {exc.limit} a reply may carry",
            )
        ) from None


def report_headers(report: Mapping[str, Any]) -> dict[str, str]:
    """The `X-Reflection-*` headers of a reply's report."""
    return {"x-reflection-actions": ",".join(report["actions"]), "x-reflection-rounds": str(report["rounds"])}


def answered(data: dict[str, Any], turns: list[Turn], upstream_headers: Any) -> Response:
    """The upstream's JSON reply as the client gets it: the re-asks' usage added, the `reflection`
    report and its headers."""
    out = reask.report(turns)
    add_usage(data, [u for t in turns for u in t.usage])
    data["reflection"] = out
    return Response(
        reply_bytes(data),
        status_code=200,
        headers={**downstream(upstream_headers), **report_headers(out)},
        media_type="application/json",
    )


def streamed(response: aiohttp.ClientResponse, events: AsyncIterator[bytes], where: str) -> StreamingResponse:
    """The client's event stream: the upstream's headers it may get, and where the report rides."""
    keep = downstream(response.headers)
    keep["x-reflection-gate"] = f"streamed; see the reflection field on {where}"
    return StreamingResponse(events, status_code=200, headers=keep, media_type="text/event-stream")
