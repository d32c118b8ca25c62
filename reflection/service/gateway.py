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
  why), up to `gate.max_reflect_rounds` rounds (also accepted as `upstream.max_reflect_rounds`); its new calls are gated in turn and a call
  already accepted is not added twice. Calls still refused get `gate.reflect_fallback`. The rounds are `reflection.reask`'s.
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
  that breaks, goes past a bound or the deadline ends with an `error` event (`_stream`).

The modules below this one: `_upstream` (the upstream client), `_settle` (one request's turns,
with `reflection.reask`), `_stream` (stream reassembly), `_dialects` (each API's shapes).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
from starlette.responses import Response

from reflection._json import parse_json_keeping
from reflection._text import plain_line
from reflection.config import UpstreamConfig
from reflection.reask import Budget, Said, Turn, note, report
from reflection.service import _anthropic, _responses
from reflection.service._dialects import (
    CHAT,
    UNREADABLE,
    Refused,
    lenient,
    lenient_dumps,
    message_calls,
    problem,
    read_reply,
    reply_text,
    usage_sum,
)
from reflection.service._metrics import TenantMetrics
from reflection.service._middleware import ARRIVED, AUTH_HEADER, DEADLINE, LITELLM_AUTH_HEADER
from reflection.service._responses import ResponseMemory
from reflection.service._settle import Call, answered, settle, streamed
from reflection.service._sse import Event
from reflection.service._stream import ChatChoice, data_event, finished, relay
from reflection.service._upstream import HOP_BY_HOP, UpstreamClient, decompressed

if TYPE_CHECKING:
    from reflection.gate import Gate

__all__ = ["Gateway"]

_NOT_UPSTREAM = HOP_BY_HOP | {
    "authorization",
    AUTH_HEADER,
    "accept-encoding",
    "cookie",
    "expect",
    "content-encoding",
    "x-api-key",
}
_TOOLS = frozenset({"tools"})
_DEFAULT_MAX_CALLS = 1024


def _owner(headers: Mapping[str, str], state: Mapping[str, Any]) -> bytes:
    """A digest of the request's credentials: the service key it used and any upstream key it sent."""
    parts = [str(state.get("key_index", "")), headers.get("authorization", ""), headers.get(LITELLM_AUTH_HEADER, "")]
    return hashlib.blake2b("\x00".join(parts).encode("utf-8", "replace"), digest_size=16).digest()


class Gateway:
    """Forwards Chat Completions, Responses and (with `upstream.anthropic_base_url`) Anthropic
    Messages requests to `upstream` and gates the tool calls in the replies with `gate` (its
    policy's `max_reflect_rounds` and `reflect_fallback` bound the re-asks), with up to
    `connections` upstream requests at once (or on `session`, which the caller closes). Create it
    inside a running event loop (see `_upstream.UpstreamClient`)."""

    def __init__(
        self,
        upstream: UpstreamConfig,
        gate: Gate,
        metrics: TenantMetrics,
        *,
        connections: int = 256,
        session: aiohttp.ClientSession | None = None,
        max_calls: int = _DEFAULT_MAX_CALLS,
        max_body_bytes: int = 4_000_000,
    ):
        self.upstream = upstream
        self.gate = gate
        self.metrics = metrics
        self.max_calls = max_calls
        self.max_body_bytes = max_body_bytes
        self.client = UpstreamClient(upstream, metrics, connections=connections, session=session)
        self.url = self.client.url_for(CHAT)
        self.responses = ResponseMemory(upstream.response_memory_bytes)
        """The Responses turns this gateway relayed, for `previous_response_id` (see `_responses`)."""

    @property
    def session(self) -> aiohttp.ClientSession:
        """The upstream HTTP session (shared by the gateways with the same upstream timeout)."""
        return self.client.session

    @property
    def anthropic_url(self) -> str | None:
        """The Anthropic Messages base URL, or None (then `/v1/messages` answers 404)."""
        return self.client.anthropic_url

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the upstream HTTP session if the gateway created it."""
        await self.client.aclose()

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
        out_headers = (
            self._anthropic_headers(headers, state) if api == "messages" else self._upstream_headers(headers, state)
        )
        if isinstance(out_headers, Response):
            return out_headers
        secrets = _secrets(headers, out_headers)
        url = (
            self.url
            if api == "chat"
            else self.client.url_for(_responses.DIALECT if api == "responses" else _anthropic.DIALECT)
        )
        try:
            raw, body = self._read_request(raw, headers)
            if body is None:
                if "accept-encoding" in headers:  # the bytes go back as they come: in an encoding the client takes
                    out_headers["accept-encoding"] = headers["accept-encoding"]
                return await self.client.pass_through(url, raw, out_headers, secrets)
            owner = _owner(headers, state) if api == "responses" else b""
            call = Call(
                self.client,
                self.gate,
                self.metrics,
                self.max_calls,
                body,
                out_headers,
                secrets,
                state.get(ARRIVED),
                state.get(DEADLINE),
                owner,
            )
            if api == "responses":
                return await _responses.answer(call, raw, self.responses)
            if api == "messages":
                return await _anthropic.answer(call, raw)
            if body.get("stream"):
                return await self._stream(call, raw)
            return await self._complete(call, raw)
        except Refused as refused:
            return refused.response

    def _read_request(self, raw: bytes, headers: Mapping[str, str]) -> tuple[bytes, dict[str, Any] | None]:
        """The body as the upstream will get it, and its JSON with `tools` as text; None for a request
        without tools (passed through). Raises `Refused` for one that cannot be read."""
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding in ("gzip", "x-gzip", "deflate"):
            raw = decompressed(raw, encoding, self.max_body_bytes)
        elif encoding not in ("", "identity"):
            raise Refused(
                problem(
                    415,
                    f"request bodies encoded with {plain_line(encoding, 40)!r} are not accepted; "
                    "send identity, gzip or deflate",
                )
            )
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
                return problem(
                    502,
                    f"the upstream key is not set: environment variable {self.upstream.api_key_env} "
                    "(upstream.api_key_env) is empty",
                )
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
                return problem(
                    502,
                    f"the Anthropic key is not set: environment variable {env} "
                    "(upstream.anthropic_api_key_env) is empty",
                )
            out["x-api-key"] = key
            return out
        used = state.get("auth_header")
        if used != LITELLM_AUTH_HEADER and LITELLM_AUTH_HEADER in headers:
            out["x-api-key"] = headers[LITELLM_AUTH_HEADER]
        if used != "authorization" and "authorization" in headers:  # an OAuth bearer token
            out["authorization"] = headers["authorization"]
        return out

    # --- Chat Completions -------------------------------------------------------------------

    async def _complete(self, call: Call, raw: bytes) -> Response:
        response = await call.forward(CHAT, raw)
        if isinstance(response, Response):
            return response
        upstream_headers = response.headers
        data = read_reply(await self.client.read(response))
        if not isinstance(data, dict):
            return self.client.failed(
                "unreadable", 502, "the upstream's answer is not JSON, so the tool calls in it could not be checked"
            )
        choices = data.get("choices")
        turns: list[Turn] = []
        if isinstance(choices, list):
            budget = call.budget()
            for choice in choices:
                message = choice.get("message") if isinstance(choice, dict) else None
                if not isinstance(message, dict):
                    continue
                calls = message_calls(message)
                if calls is None:
                    continue
                turn = await settle(call, CHAT, Said(calls, message), budget)
                turns.append(turn)
                CHAT.write(choice, message, turn)
        return answered(data, turns, upstream_headers)

    async def _stream(self, call: Call, raw: bytes) -> Response:
        response = await call.forward(CHAT, raw)
        if isinstance(response, Response):
            return response
        return streamed(response, self._relay(call, response), "the finish chunk")

    def _relay(self, call: Call, response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        """The upstream's events, with every tool call held until its choice finishes, then gated."""
        choices: dict[int, ChatChoice] = {}
        budget = call.budget()
        usage: list[Any] = []  # the re-asks' usage, added to the stream's usage chunk

        def each(event: Event) -> AsyncIterator[bytes]:
            return self._relay_event(call, event, choices, budget, usage)

        async def end() -> AsyncIterator[bytes]:
            for index, state in choices.items():  # a stream that ended without finishing a choice
                if not state.finished and state.has_calls():
                    async for out in self._finish_choice(
                        call, state, index, {"index": index, "delta": {}}, "tool_calls", budget, usage
                    ):
                        yield out

        return relay(
            response,
            call.deadline,
            self.upstream.max_response_bytes,
            each=each,
            end=end,
            unfinished=finished,
            refused=data_event,
            broken=lambda why: data_event(
                {"error": {"message": why, "type": "reflection_gateway_error", "code": None}}
            ),
        )

    async def _relay_event(
        self, call: Call, event: Event, choices: dict[int, ChatChoice], budget: Budget, usage: list[Any]
    ) -> AsyncIterator[bytes]:
        payload = event.data
        if payload is None:
            yield event.encode()  # comments, retry hints
            return
        if payload.strip() == "[DONE]":
            yield event.encode("[DONE]")
            return
        chunk = read_reply(payload.encode())
        if chunk is UNREADABLE:
            raise Refused(
                problem(
                    502, "the upstream sent an event that is not JSON, so the tool calls in it could not be checked"
                )
            )
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
            state = choices.setdefault(index, ChatChoice(self.max_calls))
            state.base = base
            delta = given if isinstance(given := choice.get("delta"), dict) else {}
            state.take(delta)
            rest = {k: v for k, v in delta.items() if k not in ("tool_calls", "function_call")}
            finish = choice.get("finish_reason")
            if finish is not None:
                async for out in self._finish_choice(
                    call, state, index, {**choice, "delta": rest}, finish, budget, usage
                ):
                    yield out
            elif rest or ("tool_calls" not in delta and "function_call" not in delta):
                yield data_event({**base, "choices": [{**choice, "delta": rest}]})

    async def _finish_choice(
        self,
        call: Call,
        state: ChatChoice,
        index: int,
        out: dict[str, Any],
        finish: str,
        budget: Budget,
        usage: list[Any],
    ) -> AsyncIterator[bytes]:
        """Gate the choice's held calls together and send what comes of them, then its finish chunk."""
        state.finished = True
        base = state.base
        turn = Turn()
        calls = state.calls()
        if calls:
            turn = await settle(call, CHAT, Said(calls), budget)
        if state.unreadable:
            turn.applied.append("deny")
            turn.notes.append(note("A tool call the gateway could not read was removed."))
        for position, sent in enumerate(turn.calls):
            function = sent.get("function", {}) if isinstance(sent, dict) else {}
            if state.legacy:
                delta: dict[str, Any] = {
                    "function_call": {"name": function.get("name"), "arguments": function.get("arguments")}
                }
            else:
                delta = {
                    "tool_calls": [
                        {
                            "index": position,
                            "id": sent.get("id"),
                            "type": "function",
                            "function": {"name": function.get("name"), "arguments": function.get("arguments")},
                        }
                    ]
                }
            yield data_event({**base, "choices": [{"index": index, "delta": delta, "finish_reason": None}]})
        if turn.notes:
            lead = "\n\n" if state.text_sent else ""
            yield data_event(
                {
                    **base,
                    "choices": [
                        {"index": index, "delta": {"content": lead + "\n".join(turn.notes)}, "finish_reason": None}
                    ],
                }
            )
        if finish in ("tool_calls", "function_call") and not turn.calls:
            finish = "stop"
        summary = report([turn])
        usage.extend(turn.usage)
        if isinstance(base.get("usage"), dict):
            base = {**base, "usage": usage_sum(base["usage"], turn.usage)}
        yield data_event({**base, "choices": [{**out, "finish_reason": finish}], "reflection": summary})


def _secrets(headers: Mapping[str, str], out_headers: Mapping[str, str]) -> list[bytes]:
    """The keys in play on this request (the client's and the upstream's), to redact from what the upstream says."""
    found = []
    for value in (
        headers.get("authorization"),
        headers.get(AUTH_HEADER),
        headers.get("x-api-key"),
        out_headers.get("authorization"),
        out_headers.get("x-api-key"),
    ):
        if value:
            token = value.partition(" ")[2] if value.lower().startswith("bearer ") else value
            if len(token.strip()) >= 8:
                found.append(token.strip().encode("latin-1", "replace"))
    return found
