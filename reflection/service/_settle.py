"""One client request to the gateway, and the settling of its model turns: the service side of
`reflection.reask`, below every API module (`gateway`, `_responses`, `_anthropic`).

`settle` runs the shape-neutral re-ask rounds with the gate, the API's `Dialect` and the upstream
client: the gate reads the request's conversation as the dialect gives it, a re-ask is the
client's request with the extended conversation POSTed to the dialect's endpoint, and a turn with
more calls than a reply may carry is refused (502) whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
from starlette.responses import Response, StreamingResponse

from reflection import reask
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

    def budget(self) -> Budget:
        """The re-ask bounds for this request (`gate.max_reflect_rounds`, `gate.reflect_fallback`)."""
        return Budget(self.gate.policy, self.max_calls)


async def settle(call: Call, dialect: Dialect, said: Said, budget: Budget) -> Turn:
    """Gate one model turn's calls (`said`) in `dialect`'s shapes, re-asking the model while the
    rounds last (see `reflection.reask`); `budget` is the request's, shared by its turns. Raises
    `Refused` with what the client gets instead when an answer cannot be passed on."""
    tools = dialect.specs(call.body)
    conversation = dialect.conversation(call.body)

    async def check(calls: list[Any]) -> list[Decision]:
        decided = await call.gate.check(calls, tools, dialect.history(call.body, conversation), started=call.started)
        return decided if isinstance(decided, list) else [decided]

    async def ask(turn: Said, calls: list[Any], results: list[str], round_: int) -> Reply:
        nonlocal conversation
        conversation, _ = dialect.extend(conversation, turn, calls, results, round_)
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
