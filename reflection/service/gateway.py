"""The gateway: `POST /v1/chat/completions` (and `/v1/responses`, `/v1/messages`) forwarded to the
upstream model, with every tool call in the reply gated before the client sees it.

What follows is said of Chat Completions; it holds for the OpenAI Responses API
(`reflection.service._responses`) and Anthropic Messages (`reflection.service._anthropic`) in
their own shapes: the requests are read, errors passed and bounds kept by the same code, every
model turn's calls are settled by the same loop (`Gateway.settle`, one `Dialect` per API in
`reflection.service._dialects`), and each API's stream is held and gated as described there.

- A request is understood or refused: its body is read as the clients' and the upstream's JSON
  readers read it (NaN, lone surrogates; gzip or deflate encoded), and a body that cannot be
  read gets 400 (415 for another encoding). Legacy `functions` get 400: only `tools` are gated.
  A request without `tools` is answered byte for byte (streamed or not).
- An upstream error (any status but 200) reaches the client with its status and body (any key
  the gateway or the client sent redacted) and without the headers the gateway owns.
- Each tool call of the reply (and a legacy `function_call`) is gated with the request's
  `messages` as history and its `tools` as specs. `allow`: passed through. `modify`: the
  verified correction replaces it. `reflect`: the model is asked again, once per round for all
  refused calls together, shown its whole turn (which calls were accepted, which refused and
  why), up to `upstream.max_reflect_rounds` rounds; its new calls are gated in turn and a call
  already accepted is not added twice. Calls still refused get `upstream.reflect_fallback`.
  `deny`: the call is removed and the message says why. `escalate`: the call is removed and
  returned under `reflection.escalated` for a person to approve, and the message says so.
- A reply the gateway cannot read, or one past `upstream.max_response_bytes`, or with more
  tool calls than `max_calls`, is refused with 502: nothing unchecked reaches the client.
- The reply carries a `reflection` field (every decision with its round, the usage of each
  round) and the headers `X-Reflection-Actions` and `X-Reflection-Rounds`; `usage` adds up
  every round's upstream usage.
- `stream: true`: text deltas pass through as they arrive; every tool call is held, by its
  index, until its choice finishes, then the choice's calls are gated together and sent whole
  (or not). The `reflection` field rides on the chunk that carries `finish_reason`. A stream
  that breaks, goes past a bound or the deadline ends with an `error` event.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
import zlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
import anyio
from starlette.responses import Response, StreamingResponse

from reflection._json import parse_json_keeping
from reflection._own_words import remember
from reflection.config import UpstreamConfig
from reflection.model import plain_text
from reflection.service._dialects import (
    ANTHROPIC,
    CHAT,
    UNREADABLE,
    Dialect,
    Refused,
    ResponsesDialect,
    Said,
    identity,
    lenient,
    lenient_dumps,
    message_calls,
    note,
    problem,
    quoted,
    read_reply,
    reply_bytes,
    reply_text,
    usage_sum,
)
from reflection.service._middleware import ARRIVED, AUTH_HEADER, DEADLINE, LITELLM_AUTH_HEADER
from reflection.service._sse import Event, StreamTooLarge, events

__all__ = ["Call", "Gateway", "Turn", "add_usage", "downstream", "error_event", "report", "report_headers", "unchanged"]

# Not forwarded either way: connection-level headers, and what the gateway sets itself.
_HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "host", "content-length",
})
_NOT_UPSTREAM = _HOP_BY_HOP | {"authorization", AUTH_HEADER, "accept-encoding", "cookie", "expect",
                               "content-encoding", "x-api-key"}
# What the client gets from the gateway only: its own report, cookies, transport security and CORS.
_GATEWAY_OWNED = frozenset({"set-cookie", "set-cookie2", "strict-transport-security", "alt-svc"})
_TOOLS = frozenset({"tools"})
_API_DIALECTS: dict[str, Dialect] = {"chat": CHAT, "responses": ResponsesDialect(), "messages": ANTHROPIC}
"""The dialect whose upstream path each route forwards to (the Responses route makes its own per request)."""
_DEFAULT_MAX_CALLS = 1024


@dataclasses.dataclass
class Turn:
    """The settling of one model turn's calls: what the client gets and the record of how."""

    calls: list[dict[str, Any]] = dataclasses.field(default_factory=list)
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


@dataclasses.dataclass
class Call:
    """One client request being answered: what the dialect modules need from the gateway."""

    gateway: Gateway
    body: dict[str, Any]
    """The request's JSON, `tools` kept as JSON text."""
    headers: dict[str, str]
    """The headers for the upstream."""
    secrets: list[bytes]
    """The keys in play, redacted from anything the upstream says."""
    started: float | None
    deadline: float | None
    owner: bytes
    """Who made the request (a digest of its credentials), so one client's stored turns are never another's."""


def _owner(headers: Mapping[str, str], state: Mapping[str, Any]) -> bytes:
    """A digest of the request's credentials: the service key it used and any upstream key it sent."""
    parts = [str(state.get("key_index", "")), headers.get("authorization", ""), headers.get(LITELLM_AUTH_HEADER, "")]
    return hashlib.blake2b("\x00".join(parts).encode("utf-8", "replace"), digest_size=16).digest()


def _removed(said: Said, turn: Turn) -> None:
    """Record the call-like items of a turn the gateway cannot check: they are not passed on."""
    for kind in said.removed:
        turn.applied.append("deny")
        turn.notes.append(note(f"A {quoted(kind)} item the gateway cannot check was removed and will not run."))
    said.removed = []


class Gateway:
    """Forwards Chat Completions, Responses and (with `upstream.anthropic_base_url`) Anthropic
    Messages requests to `upstream` and gates the tool calls in the replies, with up to
    `connections` upstream requests at once (or on `session`, which the caller closes).

    The upstream client is aiohttp rather than httpx: with its C parser and a flat connection
    pool it costs about a sixth of httpx's CPU per request (56 vs 341 us measured against the
    stand-in model), which is most of what the gateway adds. Create it inside a running event loop.
    """

    def __init__(self, upstream: UpstreamConfig, gate: Any, metrics: Any, *, connections: int = 256,
                 session: aiohttp.ClientSession | None = None, max_calls: int = _DEFAULT_MAX_CALLS,
                 max_body_bytes: int = 4_000_000):
        from reflection.service._responses import ResponseMemory

        self.upstream = upstream
        self.gate = gate
        self.metrics = metrics
        self.max_calls = max_calls
        self.max_body_bytes = max_body_bytes
        self.url = upstream.base_url.rstrip("/") + CHAT.path
        self.anthropic_url = upstream.anthropic_base_url.rstrip("/") if upstream.anthropic_base_url else None
        self.responses = ResponseMemory(upstream.response_memory_bytes)
        """The Responses turns this gateway relayed, for `previous_response_id` (see `_responses`)."""
        self._owns_session = session is None
        # upstream.timeout bounds each wait for data, as httpx's read timeout did, not the whole reply.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=upstream.timeout)
        self.session = session or aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections, limit_per_host=connections), timeout=timeout,
            skip_auto_headers=("content-type",),  # a body is sent with the client's content type or none, as it came
            # No cookie jar: a cookie the upstream sets for one client must not ride on another's request.
            cookie_jar=aiohttp.DummyCookieJar())

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the upstream HTTP session if the gateway created it."""
        if self._owns_session:
            await self.session.close()

    def url_for(self, dialect: Dialect) -> str:
        """The upstream URL of `dialect`'s endpoint."""
        if dialect.path == "/messages":
            assert self.anthropic_url is not None  # the route answers 404 without one
            return self.anthropic_url + dialect.path
        return self.upstream.base_url.rstrip("/") + dialect.path

    # --- the request ------------------------------------------------------------------------

    async def handle(self, raw: bytes, headers: Mapping[str, str], state: Mapping[str, Any]) -> Response:
        """Answer one `POST /v1/chat/completions` whose body is `raw`."""
        return await self._handle("chat", raw, headers, state)

    async def handle_responses(self, raw: bytes, headers: Mapping[str, str], state: Mapping[str, Any]) -> Response:
        """Answer one `POST /v1/responses` whose body is `raw` (see `reflection.service._responses`)."""
        return await self._handle("responses", raw, headers, state)

    async def handle_messages(self, raw: bytes, headers: Mapping[str, str], state: Mapping[str, Any]) -> Response:
        """Answer one Anthropic `POST /v1/messages` whose body is `raw` (see `reflection.service._anthropic`)."""
        return await self._handle("messages", raw, headers, state)

    async def _handle(self, api: str, raw: bytes, headers: Mapping[str, str], state: Mapping[str, Any]) -> Response:
        out_headers = self._anthropic_headers(headers, state) if api == "messages" else \
            self._upstream_headers(headers, state)
        if isinstance(out_headers, Response):
            return out_headers
        secrets = _secrets(headers, out_headers)
        url = self.url if api == "chat" else self.url_for(_API_DIALECTS[api])
        try:
            raw, body = self._read_request(raw, headers)
            if body is None:
                if "accept-encoding" in headers:  # the bytes go back as they come: in an encoding the client takes
                    out_headers["accept-encoding"] = headers["accept-encoding"]
                return await self._pass_through(url, raw, out_headers, secrets)
            started = state.get(ARRIVED)
            if api != "chat":
                from reflection.service import _anthropic, _responses

                owner = _owner(headers, state) if api == "responses" else b""
                call = Call(self, body, out_headers, secrets, started, state.get(DEADLINE), owner)
                return await (_responses.answer if api == "responses" else _anthropic.answer)(call, raw)
            if body.get("stream"):
                return await self._stream(raw, body, out_headers, secrets, started, state.get(DEADLINE))
            return await self._complete(raw, body, out_headers, secrets, started)
        except Refused as refused:
            return refused.response

    def _read_request(self, raw: bytes, headers: Mapping[str, str]) -> tuple[bytes, dict[str, Any] | None]:
        """The body as the upstream will get it, and its JSON with `tools` as text; None for a request
        without tools (passed through). Raises `Refused` for one that cannot be read."""
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding in ("gzip", "x-gzip", "deflate"):
            raw = _decompressed(raw, encoding, self.max_body_bytes)
        elif encoding not in ("", "identity"):
            raise Refused(problem(415, f"request bodies encoded with {plain_text(encoding, 40)!r} are not accepted; "
                                       "send identity, gzip or deflate"))
        try:
            # `tools` stays JSON text: the gate's spec cache is keyed by it, so a client that sends
            # the same tools on every request has them read once.
            body = parse_json_keeping(raw, _TOOLS)
        except ValueError:
            body = lenient(raw)
            if isinstance(body, dict) and "tools" in body:
                body["tools"] = lenient_dumps(body["tools"]).encode()
        if not isinstance(body, dict):
            raise Refused(problem(400, "the request body is not a JSON object"))
        if body.get("functions") not in (None, []):
            raise Refused(problem(400, "legacy `functions` are not gated: send the tool specs as `tools`"))
        if body.get("tools", b"").strip() in (b"", b"[]", b"null"):
            return raw, None
        return raw, body

    def _upstream_headers(self, headers: Mapping[str, str], state: Mapping[str, Any]) -> dict[str, str] | Response:
        out = {k: v for k, v in headers.items() if k.lower() not in _NOT_UPSTREAM}
        if "request_id" in state:
            out["x-request-id"] = state["request_id"]
        if self.upstream.api_key_env:
            key = os.environ.get(self.upstream.api_key_env)
            if not key:
                return problem(502, f"the upstream key is not set: environment variable {self.upstream.api_key_env} "
                                    "(upstream.api_key_env) is empty")
            out["authorization"] = f"Bearer {key}"
        elif state.get("auth_header") != "authorization" and "authorization" in headers:
            # The client's own key for the upstream (the service key, if any, came in AUTH_HEADER).
            out["authorization"] = headers["authorization"]
        return out

    def _anthropic_headers(self, headers: Mapping[str, str], state: Mapping[str, Any]) -> dict[str, str] | Response:
        """Anthropic's key travels in `x-api-key`, the header LiteLLM sends the service key in: a
        client's `x-api-key` goes upstream unless it was the service key (then the Anthropic key
        comes from `upstream.anthropic_api_key_env`, or the client sends the service key in
        `x-reflection-api-key` and its own Anthropic key in `x-api-key`)."""
        out = {k: v for k, v in headers.items() if k.lower() not in _NOT_UPSTREAM}
        if "request_id" in state:
            out["x-request-id"] = state["request_id"]
        env = self.upstream.anthropic_api_key_env
        if env:
            key = os.environ.get(env)
            if not key:
                return problem(502, f"the Anthropic key is not set: environment variable {env} "
                                    "(upstream.anthropic_api_key_env) is empty")
            out["x-api-key"] = key
            return out
        used = state.get("auth_header")
        if used != LITELLM_AUTH_HEADER and LITELLM_AUTH_HEADER in headers:
            out["x-api-key"] = headers[LITELLM_AUTH_HEADER]
        if used != "authorization" and "authorization" in headers:  # an OAuth bearer token
            out["authorization"] = headers["authorization"]
        return out

    async def send(self, url: str, content: bytes, headers: dict[str, str], *,
                   decode: bool = True) -> aiohttp.ClientResponse | Response:
        """POST to the upstream: its response (body unread; `decode=False` keeps a compressed body
        compressed), or the problem answer (504, 502) when it could not be had."""
        started = time.perf_counter()
        try:
            response = await self.session.post(url, data=content, headers=headers, auto_decompress=decode)
        except TimeoutError:  # aiohttp's connect and read timeouts are TimeoutErrors
            return self.failed("timeout", 504, f"the upstream model did not answer within {self.upstream.timeout:g} s "
                                               "(upstream.timeout)")
        except aiohttp.ClientError as exc:
            return self.failed("unreachable", 502, f"the upstream model at {url.rsplit('/', 1)[0]} could not be "
                                                   f"reached: {type(exc).__name__}")
        self.metrics.upstream.labels(str(response.status)).inc()
        self.metrics.upstream_latency.observe(time.perf_counter() - started)
        return response

    def failed(self, label: str, status: int, detail: str) -> Response:
        """The gateway's problem answer, counted in the upstream metrics under `label`."""
        self.metrics.upstream.labels(label).inc()
        return problem(status, detail)

    async def read(self, response: aiohttp.ClientResponse) -> bytes:
        """The whole body, at most `upstream.max_response_bytes`; raises `Refused` past it or when it breaks."""
        limit = self.upstream.max_response_bytes
        body = bytearray()
        try:
            if response.content_length is not None and response.content_length <= limit:
                return await response.read()  # a declared length within the bound: one read (aiohttp stops at it)
            async for data in response.content.iter_any():
                body += data
                if len(body) > limit:
                    raise Refused(self.failed("too_large", 502, f"the upstream's answer is larger than {limit} bytes "
                                                                "(upstream.max_response_bytes)"))
        except TimeoutError:
            raise Refused(self.failed("timeout", 504, f"the upstream model stopped answering for "
                                                      f"{self.upstream.timeout:g} s (upstream.timeout)")) from None
        except aiohttp.ClientError as exc:
            raise Refused(self.failed("unreachable", 502, f"the upstream model's answer broke off: "
                                                          f"{type(exc).__name__}")) from None
        finally:
            response.release()
        return bytes(body)

    async def post(self, url: str, content: bytes, headers: dict[str, str], secrets: list[bytes]) -> dict[str, Any]:
        """POST a JSON body; the upstream's JSON answer. Any other answer (an error status, a body
        that is not a JSON object) raises `Refused` with what the client gets instead."""
        response = await self.send(url, content, {**headers, "content-type": "application/json"})
        if isinstance(response, Response):
            raise Refused(response)
        status, upstream_headers = response.status, response.headers
        body = await self.read(response)
        if status != 200:
            raise Refused(unchanged(status, upstream_headers, body, secrets))
        data = read_reply(body)
        if not isinstance(data, dict):
            raise Refused(self.failed("unreadable", 502, "the upstream's answer is not a JSON object, so the tool "
                                                         "calls in it could not be checked"))
        return data

    async def _pass_through(self, url: str, raw: bytes, headers: dict[str, str], secrets: list[bytes]) -> Response:
        """Forward the request as it came and stream the answer back as it comes, bytes unchanged."""
        response = await self.send(url, raw, headers, decode=False)
        if isinstance(response, Response):
            return response
        if response.status != 200:  # an error may echo a key: read it (bounded), decode it and redact
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            content = await self.read(response)
            if encoding not in ("", "identity"):
                try:
                    content = _decompressed(content, encoding, self.upstream.max_response_bytes)
                except Refused:
                    return self.failed("unreadable", 502, f"the upstream answered HTTP {response.status} in an "
                                                          "encoding the gateway cannot read")
            return unchanged(response.status, response.headers, content, secrets)

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.content.iter_any():
                    yield chunk
            finally:
                response.release()

        return StreamingResponse(body(), status_code=response.status, headers=downstream(response.headers, keep_encoding=True))

    # --- plain completions ------------------------------------------------------------------

    async def _complete(self, raw: bytes, body: dict[str, Any], headers: dict[str, str], secrets: list[bytes],
                        started: float | None) -> Response:
        response = await self.send(self.url, raw, {**headers, "content-type": "application/json"})
        if isinstance(response, Response):
            return response
        status, upstream_headers = response.status, response.headers
        content = await self.read(response)
        if status != 200:
            return unchanged(status, upstream_headers, content, secrets)
        data = read_reply(content)
        if not isinstance(data, dict):
            return self.failed("unreadable", 502, "the upstream's answer is not JSON, so the tool calls in it could "
                                                  "not be checked")
        choices = data.get("choices")
        turns: list[Turn] = []
        if isinstance(choices, list):
            budget = [self.upstream.max_reflect_rounds]
            for choice in choices:
                message = choice.get("message") if isinstance(choice, dict) else None
                if not isinstance(message, dict):
                    continue
                calls = message_calls(message)
                if calls is None:
                    continue
                turn = await self.settle(CHAT, Said(calls, message), body, headers, secrets, started, budget)
                turns.append(turn)
                _apply(choice, message, turn)
        out = report(turns)
        add_usage(data, turns)
        data["reflection"] = out
        return Response(reply_bytes(data), status_code=200,
                        headers={**downstream(upstream_headers), **report_headers(out)},
                        media_type="application/json")

    async def settle(self, dialect: Dialect, said: Said, body: dict[str, Any], headers: dict[str, str],
                     secrets: list[bytes], started: float | None, budget: list[int]) -> Turn:
        """Gate one model turn's calls (`said`), re-asking the model (once per round, for every
        refused call together, shown its whole turn) while the rounds last; what the client gets
        and how it came to be. `dialect` knows the API's shapes.

        `budget` is the re-asks left for the whole client request (shared by its choices)."""
        turn = Turn()
        tools = dialect.specs(body)
        conversation = dialect.conversation(body)
        seen: set[bytes] = set()
        ids: set[Any] = set()
        round_ = 0
        while True:
            if len(said.calls) > self.max_calls:
                raise Refused(self.failed("too_many_calls", 502, f"the upstream's answer has {len(said.calls)} tool "
                                                                 f"calls, more than the {self.max_calls} a reply may carry"))
            _removed(said, turn)
            pending = said.calls
            decisions = await self.gate.check(list(pending), tools, dialect.history(body, conversation),
                                              started=started) if pending else []
            refused: list[tuple[Any, Any]] = []
            results: list[Callable[[], str]] = []
            for call, decision in zip(pending, decisions, strict=True):
                self.metrics.observe_decision(decision)
                turn.decisions.append(_decision_entry(decision, round_, dialect.call_id(call)))
                outcome = self._outcome(dialect, call, decision, turn, seen, ids)
                if decision.action == "reflect":
                    refused.append((call, decision))
                results.append(outcome)
            if not refused:
                return turn
            if round_ >= self.upstream.max_reflect_rounds or budget[0] <= 0:
                for call, decision in refused:
                    self._fallback(call, decision, turn)
                return turn
            budget[0] -= 1
            round_ += 1
            turn.rounds += 1
            # The model sees its whole turn: every call it made, and what became of each. The
            # gateway's own lines are remembered only now that they go into a conversation.
            texts = [result() for result in results]
            for text in texts:
                remember(text)
            conversation, _ = dialect.extend(conversation, said, pending, texts, round_)
            reply = await self.post(self.url_for(dialect), reply_bytes(dialect.reask(body, conversation)), headers,
                                    secrets)
            turn.usage.append(reply.get("usage"))
            turn.reply_id = reply.get("id")
            said = dialect.said(reply)
            if not said.calls:
                # The model answered in words instead (e.g. asking the user for a missing value).
                _removed(said, turn)
                for call, decision in refused:
                    turn.applied.append("reflect")
                    turn.decisions.append({**_decision_entry(decision, round_, dialect.call_id(call)),
                                           "action": "reflect",
                                           "reason": "the model answered in words instead of a new call"})
                if said.text:
                    turn.notes.append(said.text)
                return turn

    def _outcome(self, dialect: Dialect, call: Any, decision: Any, turn: Turn, seen: set[bytes],
                 ids: set[Any]) -> Callable[[], str]:
        """Apply one decision to `turn`; the text the model reads about it if it is asked again
        (made only then: most turns are never re-asked)."""
        action = decision.action
        if action in ("allow", "modify"):
            sent = call if action == "allow" else dialect.corrected(decision.call, call)
            if turn.calls:  # the first call of a turn cannot repeat one: its key is made when a second comes
                if not seen:
                    seen.update(identity(kept) for kept in turn.calls)
                key = identity(sent)
                if key in seen:  # the model proposed a call it already has: keep the first
                    return lambda: f"The call to {quoted(decision.tool)} was already accepted; do not propose it again."
                seen.add(key)
            if isinstance(sent, dict) and dialect.call_id(sent) in ids:  # one id per call in the final reply
                sent = dialect.with_id(sent, f"{dialect.call_id(sent)}_{len(turn.calls)}")
            if isinstance(sent, dict):
                ids.add(dialect.call_id(sent))
            turn.calls.append(sent)
            turn.applied.append(action)
            return lambda: (f"The call to {quoted(decision.tool)} was accepted and will run when this turn ends; "
                            "do not propose it again.")
        if action == "escalate":
            self._escalate(call, decision, turn)
            return lambda: (f"The call to {quoted(decision.tool)} is waiting for a person's approval; "
                            "do not propose it again.")
        if action == "deny":
            self._deny(decision, turn)
            return lambda: f"The call to {quoted(decision.tool)} was blocked and will not run."
        return lambda: decision.feedback or decision.reason

    def _fallback(self, call: Any, decision: Any, turn: Turn) -> None:
        if self.upstream.reflect_fallback == "escalate":
            self._escalate(call, decision, turn)
        else:
            self._deny(decision, turn)

    @staticmethod
    def _escalate(call: Any, decision: Any, turn: Turn) -> None:
        turn.applied.append("escalate")
        turn.escalated.append({"call": call, "feedback": decision.feedback, "reason": decision.reason})
        turn.notes.append(note(f"The call to {quoted(decision.tool)} is waiting for a person's approval "
                               f"({plain_text(decision.reason)})."))

    @staticmethod
    def _deny(decision: Any, turn: Turn) -> None:
        turn.applied.append("deny")
        turn.notes.append(note(f"The call to {quoted(decision.tool)} was blocked by reflection ({plain_text(decision.reason)})."))

    # --- streaming --------------------------------------------------------------------------

    async def _stream(self, raw: bytes, body: dict[str, Any], headers: dict[str, str], secrets: list[bytes],
                      started: float | None, deadline: float | None) -> Response:
        response = await self.send(self.url, raw, {**headers, "content-type": "application/json"})
        if isinstance(response, Response):
            return response
        if response.status != 200:
            status, upstream_headers = response.status, response.headers
            return unchanged(status, upstream_headers, await self.read(response), secrets)
        keep = downstream(response.headers)
        keep["x-reflection-gate"] = "streamed; see the reflection field on the finish chunk"
        return StreamingResponse(self._relay(response, body, headers, secrets, started, deadline), status_code=200,
                                 headers=keep, media_type="text/event-stream")

    async def _relay(self, response: aiohttp.ClientResponse, body: dict[str, Any], headers: dict[str, str],
                     secrets: list[bytes], started: float | None, deadline: float | None) -> AsyncIterator[bytes]:
        """The upstream's events, with every tool call held until its choice finishes, then gated."""
        choices: dict[int, _StreamChoice] = {}
        budget = [self.upstream.max_reflect_rounds]
        usage: list[Any] = []  # the re-asks' usage, added to the stream's usage chunk
        # End with an error event a little before the service's deadline would cut the stream mid-chunk.
        remaining = max(0.0, deadline - time.monotonic() - 0.25) if deadline is not None else float("inf")
        limit = self.upstream.max_response_bytes
        failure: str | None = "the upstream's stream did not finish in time (the request's deadline)"
        try:
            with anyio.move_on_after(remaining):
                try:
                    async for event in events(response.content.iter_any(), max_bytes=limit, max_total=limit):
                        async for out in self._relay_event(event, choices, body, headers, secrets, started, budget,
                                                           usage):
                            yield out
                    for index, state in choices.items():  # a stream that ended without finishing a choice
                        if not state.finished and state.has_calls():
                            async for out in self._finish_choice(state, index, {"index": index, "delta": {}},
                                                                 "tool_calls", body, headers, secrets, started, budget,
                                                                 usage):
                                yield out
                    failure = None
                except StreamTooLarge as exc:
                    failure = f"{exc} (upstream.max_response_bytes)"
                except Refused as refused:
                    failure = None
                    yield _event(error_event(refused.response))
                except (TimeoutError, aiohttp.ClientError) as exc:
                    failure = f"the upstream's stream broke off: {type(exc).__name__}"
            if failure is not None:
                yield _event({"error": {"message": failure, "type": "reflection_gateway_error", "code": None}})
        finally:
            response.release()

    async def _relay_event(self, event: Event, choices: dict[int, _StreamChoice], body: dict[str, Any],
                           headers: dict[str, str], secrets: list[bytes], started: float | None,
                           budget: list[int], usage: list[Any]) -> AsyncIterator[bytes]:
        payload = event.data
        if payload is None:
            yield event.encode()  # comments, retry hints
            return
        if payload.strip() == "[DONE]":
            yield event.encode("[DONE]")
            return
        chunk = read_reply(payload.encode())
        if chunk is UNREADABLE:
            raise Refused(problem(502, "the upstream sent an event that is not JSON, so the tool calls in it could "
                                         "not be checked"))
        if not isinstance(chunk, dict) or not isinstance(chunk.get("choices"), list) or not chunk["choices"]:
            if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict) and usage:
                chunk["usage"] = usage_sum(chunk["usage"], usage)  # the usage chunk: every round's
            yield event.encode(reply_text(chunk))
            return
        base = {k: v for k, v in chunk.items() if k != "choices"}
        for choice in chunk["choices"]:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            if type(index) is not int:
                raise Refused(problem(502, "the upstream sent a choice whose index is not an integer"))
            state = choices.setdefault(index, _StreamChoice(self.max_calls))
            state.base = base
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            state.take(delta)
            rest = {k: v for k, v in delta.items() if k not in ("tool_calls", "function_call")}
            finish = choice.get("finish_reason")
            if finish is not None:
                async for out in self._finish_choice(state, index, {**choice, "delta": rest}, finish, body, headers,
                                                     secrets, started, budget, usage):
                    yield out
            elif rest or ("tool_calls" not in delta and "function_call" not in delta):
                yield _event({**base, "choices": [{**choice, "delta": rest}]})

    async def _finish_choice(self, state: _StreamChoice, index: int, out: dict[str, Any], finish: str,
                             body: dict[str, Any], headers: dict[str, str], secrets: list[bytes],
                             started: float | None, budget: list[int], usage: list[Any]) -> AsyncIterator[bytes]:
        """Gate the choice's held calls together and send what comes of them, then its finish chunk."""
        state.finished = True
        base = state.base
        turn = Turn()
        calls = state.calls()
        if calls:
            turn = await self.settle(CHAT, Said(calls), body, headers, secrets, started, budget)
        if state.unreadable:
            turn.applied.append("deny")
            turn.notes.append(note("A tool call the gateway could not read was removed."))
        for position, call in enumerate(turn.calls):
            function = call.get("function", {}) if isinstance(call, dict) else {}
            if state.legacy:
                delta: dict[str, Any] = {"function_call": {"name": function.get("name"), "arguments": function.get("arguments")}}
            else:
                delta = {"tool_calls": [{"index": position, "id": call.get("id"), "type": "function",
                                         "function": {"name": function.get("name"), "arguments": function.get("arguments")}}]}
            yield _event({**base, "choices": [{"index": index, "delta": delta, "finish_reason": None}]})
        if turn.notes:
            lead = "\n\n" if state.text_sent else ""
            yield _event({**base, "choices": [{"index": index, "delta": {"content": lead + "\n".join(turn.notes)},
                                               "finish_reason": None}]})
        if finish in ("tool_calls", "function_call") and not turn.calls:
            finish = "stop"
        summary = report([turn])
        usage.extend(turn.usage)
        if isinstance(base.get("usage"), dict):
            base = {**base, "usage": usage_sum(base["usage"], turn.usage)}
        yield _event({**base, "choices": [{**out, "finish_reason": finish}], "reflection": summary})


class _StreamChoice:
    """One streamed choice: its tool calls being assembled by index, held until it finishes."""

    def __init__(self, max_calls: int) -> None:
        self.parts: dict[int, dict[str, Any]] = {}
        self.legacy = False
        self.unreadable = False
        self.finished = False
        self.text_sent = False
        self.base: dict[str, Any] = {}
        """The last chunk's fields but `choices` (id, model, created...), for the chunks the gateway writes."""
        self.max_calls = max_calls

    def take(self, delta: dict[str, Any]) -> None:
        """Add one delta's tool-call parts (or legacy `function_call` part) to the calls held."""
        if isinstance(delta.get("content"), str) and delta["content"]:
            self.text_sent = True
        parts = delta.get("tool_calls")
        if delta.get("function_call") is not None:
            self.legacy = True
            parts = [{"index": 0, "function": delta["function_call"]}]
        if parts is None:
            return
        if not isinstance(parts, list):
            self.unreadable = True
            return
        for part in parts:
            position = part.get("index", 0) if isinstance(part, dict) else None
            if type(position) is not int or position < 0:
                self.unreadable = True
                continue
            call = self.parts.get(position)
            if call is None:
                if len(self.parts) >= self.max_calls:
                    raise Refused(problem(502, f"the upstream's answer has more than {self.max_calls} tool calls"))
                call = self.parts[position] = {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            if isinstance(part.get("id"), str) and part["id"]:
                call["id"] = part["id"]
            function = part.get("function") if isinstance(part.get("function"), dict) else {}
            if isinstance(function.get("name"), str):
                call["function"]["name"] += function["name"]
            if isinstance(function.get("arguments"), str):
                call["function"]["arguments"] += function["arguments"]

    def has_calls(self) -> bool:
        return bool(self.parts) or self.unreadable

    def calls(self) -> list[dict[str, Any]]:
        """The assembled calls, by index."""
        return [self.parts[i] for i in sorted(self.parts)]


# --- helpers ------------------------------------------------------------------------------------

def _decompressed(raw: bytes, encoding: str, limit: int) -> bytes:
    """The request body decoded, at most `limit` bytes (a small bomb must not become a large body)."""
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise Refused(problem(415, f"{plain_text(encoding, 40)!r} encoding is not supported"))
    wbits = 16 + zlib.MAX_WBITS if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
    try:
        inflater = zlib.decompressobj(wbits)
        out = inflater.decompress(raw, limit + 1)
    except zlib.error:
        raise Refused(problem(400, f"the request body is not valid {encoding}")) from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise Refused(problem(413, f"the decoded request body is larger than {limit} bytes (service.max_body_bytes)"))
    return out


def _apply(choice: dict[str, Any], message: dict[str, Any], turn: Turn) -> None:
    """Put the turn into the reply's message: kept calls, and text for removed ones."""
    legacy = [c for c in turn.calls if isinstance(c, dict) and c.get("_legacy")]
    calls = [c for c in turn.calls if not (isinstance(c, dict) and c.get("_legacy"))]
    message.pop("function_call", None)
    if legacy:
        function = legacy[0].get("function", {})
        message["function_call"] = {"name": function.get("name"), "arguments": function.get("arguments")}
    if turn.notes:
        content = message.get("content")
        message["content"] = "\n\n".join([content, "\n".join(turn.notes)] if content else ["\n".join(turn.notes)])
    if calls:
        message["tool_calls"] = calls
    else:
        message.pop("tool_calls", None)
        if choice.get("finish_reason") in ("tool_calls", "function_call") and not legacy:
            choice["finish_reason"] = "stop"


def _decision_entry(decision: Any, round_: int, call_id: Any) -> dict[str, Any]:
    return {"round": round_, "tool": decision.tool, "call_id": call_id, "action": decision.action,
            "reason": decision.reason, "feedback": decision.feedback, "shadow_action": decision.shadow_action}


def report(turns: list[Turn]) -> dict[str, Any]:
    return {"actions": [a for t in turns for a in t.applied], "rounds": sum(t.rounds for t in turns),
            "decisions": [d for t in turns for d in t.decisions],
            "escalated": [e for t in turns for e in t.escalated],
            "reask_usage": [u for t in turns for u in t.usage]}


def add_usage(data: dict[str, Any], turns: list[Turn]) -> None:
    more = [u for t in turns for u in t.usage]
    if more:
        data["usage"] = usage_sum(data.get("usage"), more)


def report_headers(report: dict[str, Any]) -> dict[str, str]:
    return {"x-reflection-actions": ",".join(report["actions"]), "x-reflection-rounds": str(report["rounds"])}


def downstream(headers: Any, *, keep_encoding: bool = False) -> dict[str, str]:
    """The upstream's headers the client may get: not hop-by-hop ones (nor those `Connection`
    names), not those the gateway owns (its `x-reflection-*` report, cookies, HSTS, CORS)."""
    named = {token.strip().lower() for value in headers.getall("connection", []) for token in value.split(",")} \
        if hasattr(headers, "getall") else set()
    out = {}
    for key, value in headers.items():
        lower = key.lower()
        if lower in _HOP_BY_HOP or lower in _GATEWAY_OWNED or lower in named or lower.startswith(("x-reflection-",
                                                                                                "access-control-")):
            continue
        if lower == "content-encoding" and not keep_encoding:
            continue
        out[key] = value
    return out


def _secrets(headers: Mapping[str, str], out_headers: Mapping[str, str]) -> list[bytes]:
    """The keys in play on this request (the client's and the upstream's), to redact from what the upstream says."""
    found = []
    for value in (headers.get("authorization"), headers.get(AUTH_HEADER), headers.get("x-api-key"),
                  out_headers.get("authorization"), out_headers.get("x-api-key")):
        if value:
            token = value.partition(" ")[2] if value.lower().startswith("bearer ") else value
            if len(token.strip()) >= 8:
                found.append(token.strip().encode("latin-1", "replace"))
    return found


def unchanged(status: int, headers: Any, content: bytes, secrets: list[bytes]) -> Response:
    """The upstream's answer with its status and body (keys redacted), without headers the gateway owns."""
    for secret in secrets:
        content = content.replace(secret, b"[redacted]")
    out = downstream(headers)
    for key, value in list(out.items()):
        raw = value.encode("latin-1", "replace")
        if any(secret in raw for secret in secrets):
            out[key] = "[redacted]"
    return Response(content, status_code=status, headers=out)


def error_event(response: Response) -> dict[str, Any]:
    """What ends a stream that cannot go on: the upstream's own error object when it sent one
    (a 429 on a re-ask), else the gateway's reason, in the shape the SDKs raise on."""
    data = read_reply(bytes(response.body))
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return {"error": {**data["error"], "status": response.status_code}}
    detail = data.get("detail") if isinstance(data, dict) else None
    return {"error": {"message": str(detail or "the upstream's answer could not be passed on"),
                      "type": "reflection_gateway_error", "code": None, "status": response.status_code}}


def _event(chunk: Any) -> bytes:
    return b"data: " + reply_bytes(chunk) + b"\n\n"
