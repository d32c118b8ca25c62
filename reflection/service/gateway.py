"""The OpenAI-compatible gateway: `POST /v1/chat/completions` forwarded to the upstream model, with
every tool call in the reply gated before the client sees it.

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
import json
import os
import time
import zlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import anyio
from starlette.responses import Response, StreamingResponse

from reflection._json import dumps, parse_json, parse_json_keeping
from reflection._own_words import remember
from reflection.config import UpstreamConfig
from reflection.model import _plain
from reflection.service._middleware import ARRIVED, AUTH_HEADER, DEADLINE
from reflection.service._sse import Event, StreamTooLarge, events

__all__ = ["Gateway"]

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
_DEFAULT_MAX_CALLS = 1024


class _Refused(Exception):
    """The upstream's answer cannot be passed on: `response` is what the client gets instead."""

    def __init__(self, response: Response):
        super().__init__()
        self.response = response


@dataclasses.dataclass
class _Turn:
    """The settling of one choice's calls: what the client gets and the record of how."""

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


class Gateway:
    """Forwards Chat Completions to `upstream` and gates the tool calls in the replies, with up to
    `connections` upstream requests at once (or on `session`, which the caller closes).

    The upstream client is aiohttp rather than httpx: with its C parser and a flat connection
    pool it costs about a sixth of httpx's CPU per request (56 vs 341 us measured against the
    stand-in model), which is most of what the gateway adds. Create it inside a running event loop.
    """

    def __init__(self, upstream: UpstreamConfig, gate: Any, metrics: Any, *, connections: int = 256,
                 session: aiohttp.ClientSession | None = None, max_calls: int = _DEFAULT_MAX_CALLS,
                 max_body_bytes: int = 4_000_000):
        self.upstream = upstream
        self.gate = gate
        self.metrics = metrics
        self.max_calls = max_calls
        self.max_body_bytes = max_body_bytes
        self.url = upstream.base_url.rstrip("/") + "/chat/completions"
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

    # --- the request ------------------------------------------------------------------------

    async def handle(self, raw: bytes, headers: Mapping[str, str], state: Mapping[str, Any]) -> Response:
        """Answer one `POST /v1/chat/completions` whose body is `raw`."""
        out_headers = self._upstream_headers(headers, state)
        if isinstance(out_headers, Response):
            return out_headers
        secrets = _secrets(headers, out_headers)
        try:
            raw, body = self._read_request(raw, headers)
            if body is None:
                if "accept-encoding" in headers:  # the bytes go back as they come: in an encoding the client takes
                    out_headers["accept-encoding"] = headers["accept-encoding"]
                return await self._pass_through(raw, out_headers, secrets)
            started = state.get(ARRIVED)
            if body.get("stream"):
                return await self._stream(raw, body, out_headers, secrets, started, state.get(DEADLINE))
            return await self._complete(raw, body, out_headers, secrets, started)
        except _Refused as refused:
            return refused.response

    def _read_request(self, raw: bytes, headers: Mapping[str, str]) -> tuple[bytes, dict[str, Any] | None]:
        """The body as the upstream will get it, and its JSON with `tools` as text; None for a request
        without tools (passed through). Raises `_Refused` for one that cannot be read."""
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding in ("gzip", "x-gzip", "deflate"):
            raw = _decompressed(raw, encoding, self.max_body_bytes)
        elif encoding not in ("", "identity"):
            raise _Refused(_problem(415, f"request bodies encoded with {_plain(encoding, 40)!r} are not accepted; "
                                         "send identity, gzip or deflate"))
        try:
            # `tools` stays JSON text: the gate's spec cache is keyed by it, so a client that sends
            # the same tools on every request has them read once.
            body = parse_json_keeping(raw, _TOOLS)
        except ValueError:
            body = _lenient(raw)
            if isinstance(body, dict) and "tools" in body:
                body["tools"] = _lenient_dumps(body["tools"]).encode()
        if not isinstance(body, dict):
            raise _Refused(_problem(400, "the request body is not a JSON object"))
        if body.get("functions") not in (None, []):
            raise _Refused(_problem(400, "legacy `functions` are not gated: send the tool specs as `tools`"))
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
                return _problem(502, f"the upstream key is not set: environment variable {self.upstream.api_key_env} "
                                     "(upstream.api_key_env) is empty")
            out["authorization"] = f"Bearer {key}"
        elif state.get("auth_header") != "authorization" and "authorization" in headers:
            # The client's own key for the upstream (the service key, if any, came in AUTH_HEADER).
            out["authorization"] = headers["authorization"]
        return out

    async def _send(self, content: bytes, headers: dict[str, str], *,
                    decode: bool = True) -> aiohttp.ClientResponse | Response:
        """POST to the upstream: its response (body unread; `decode=False` keeps a compressed body
        compressed), or the problem answer (504, 502) when it could not be had."""
        started = time.perf_counter()
        try:
            response = await self.session.post(self.url, data=content, headers=headers, auto_decompress=decode)
        except TimeoutError:  # aiohttp's connect and read timeouts are TimeoutErrors
            return self._failed("timeout", 504, f"the upstream model did not answer within {self.upstream.timeout:g} s "
                                                "(upstream.timeout)")
        except aiohttp.ClientError as exc:
            return self._failed("unreachable", 502, f"the upstream model at {self.upstream.base_url} could not be "
                                                    f"reached: {type(exc).__name__}")
        self.metrics.upstream.labels(str(response.status)).inc()
        self.metrics.upstream_latency.observe(time.perf_counter() - started)
        return response

    def _failed(self, label: str, status: int, detail: str) -> Response:
        self.metrics.upstream.labels(label).inc()
        return _problem(status, detail)

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        """The whole body, at most `upstream.max_response_bytes`; raises `_Refused` past it or when it breaks."""
        limit = self.upstream.max_response_bytes
        body = bytearray()
        try:
            async for data in response.content.iter_any():
                body += data
                if len(body) > limit:
                    raise _Refused(self._failed("too_large", 502, f"the upstream's answer is larger than {limit} bytes "
                                                                  "(upstream.max_response_bytes)"))
        except TimeoutError:
            raise _Refused(self._failed("timeout", 504, f"the upstream model stopped answering for "
                                                        f"{self.upstream.timeout:g} s (upstream.timeout)")) from None
        except aiohttp.ClientError as exc:
            raise _Refused(self._failed("unreachable", 502, f"the upstream model's answer broke off: "
                                                            f"{type(exc).__name__}")) from None
        finally:
            response.release()
        return bytes(body)

    async def _post(self, content: bytes, headers: dict[str, str], secrets: list[bytes]) -> dict[str, Any]:
        """POST a JSON body; the upstream's JSON answer. Any other answer (an error status, a body
        that is not a JSON object) raises `_Refused` with what the client gets instead."""
        response = await self._send(content, {**headers, "content-type": "application/json"})
        if isinstance(response, Response):
            raise _Refused(response)
        status, upstream_headers = response.status, response.headers
        body = await self._read(response)
        if status != 200:
            raise _Refused(_unchanged(status, upstream_headers, body, secrets))
        data = _read_reply(body)
        if not isinstance(data, dict):
            raise _Refused(self._failed("unreadable", 502, "the upstream's answer is not a JSON object, so the tool "
                                                           "calls in it could not be checked"))
        return data

    async def _pass_through(self, raw: bytes, headers: dict[str, str], secrets: list[bytes]) -> Response:
        """Forward the request as it came and stream the answer back as it comes, bytes unchanged."""
        response = await self._send(raw, headers, decode=False)
        if isinstance(response, Response):
            return response
        if response.status != 200:  # an error may echo a key: read it (bounded), decode it and redact
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            content = await self._read(response)
            if encoding not in ("", "identity"):
                try:
                    content = _decompressed(content, encoding, self.upstream.max_response_bytes)
                except _Refused:
                    return self._failed("unreadable", 502, f"the upstream answered HTTP {response.status} in an "
                                                           "encoding the gateway cannot read")
            return _unchanged(response.status, response.headers, content, secrets)

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.content.iter_any():
                    yield chunk
            finally:
                response.release()

        return StreamingResponse(body(), status_code=response.status, headers=_downstream(response.headers, keep_encoding=True))

    # --- plain completions ------------------------------------------------------------------

    async def _complete(self, raw: bytes, body: dict[str, Any], headers: dict[str, str], secrets: list[bytes],
                        started: float | None) -> Response:
        response = await self._send(raw, {**headers, "content-type": "application/json"})
        if isinstance(response, Response):
            return response
        status, upstream_headers = response.status, response.headers
        content = await self._read(response)
        if status != 200:
            return _unchanged(status, upstream_headers, content, secrets)
        data = _read_reply(content)
        if not isinstance(data, dict):
            return self._failed("unreadable", 502, "the upstream's answer is not JSON, so the tool calls in it could "
                                                   "not be checked")
        choices = data.get("choices")
        turns: list[_Turn] = []
        if isinstance(choices, list):
            budget = [self.upstream.max_reflect_rounds]
            for choice in choices:
                message = choice.get("message") if isinstance(choice, dict) else None
                if not isinstance(message, dict):
                    continue
                calls = _message_calls(message)
                if calls is None:
                    continue
                turn = await self._settle(calls, body, headers, secrets, started, budget)
                turns.append(turn)
                _apply(choice, message, turn)
        report = _report(turns)
        _add_usage(data, turns)
        data["reflection"] = report
        return Response(_reply_bytes(data), status_code=200,
                        headers={**_downstream(upstream_headers), **_report_headers(report)},
                        media_type="application/json")

    async def _settle(self, calls: list[Any], body: dict[str, Any], headers: dict[str, str], secrets: list[bytes],
                      started: float | None, budget: list[int]) -> _Turn:
        """Gate one choice's `calls`, re-asking the model (once per round, for every refused call
        together) while the rounds last; what the client gets and how it came to be.

        `budget` is the re-asks left for the whole client request (shared by its choices)."""
        if len(calls) > self.max_calls:
            raise _Refused(self._failed("too_many_calls", 502, f"the upstream's answer has {len(calls)} tool calls, more "
                                                               f"than the {self.max_calls} a reply may carry"))
        turn = _Turn()
        tools = body.get("tools")
        history = _messages(body)
        seen: set[bytes] = set()
        ids: set[Any] = set()
        pending = calls
        round_ = 0
        while True:
            decisions = await self.gate.check(list(pending), tools, history, started=started)
            refused: list[tuple[Any, Any]] = []
            results: list[str] = []
            for call, decision in zip(pending, decisions, strict=True):
                self.metrics.observe_decision(decision)
                turn.decisions.append(_decision_entry(decision, round_, call))
                outcome = self._outcome(call, decision, turn, seen, ids)
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
            # The model sees its whole turn: every call it made, and what became of each.
            wire = [_wire(call, f"call_r{round_}_{i}") for i, call in enumerate(pending)]
            history = [*history, {"role": "assistant", "content": None, "tool_calls": wire},
                       *({"role": "tool", "tool_call_id": call["id"], "content": text}
                         for call, text in zip(wire, results, strict=True))]
            again = {k: v for k, v in body.items() if k not in ("stream", "stream_options", "n")}
            again["messages"] = history
            again["tools"] = parse_json(body["tools"])
            reply = await self._post(_reply_bytes(again), headers, secrets)
            turn.usage.append(reply.get("usage"))
            message = _first_message(reply)
            new = _message_calls(message) if message is not None else None
            if not new:
                # The model answered in words instead (e.g. asking the user for a missing value).
                text = message.get("content") if message is not None else None
                for call, decision in refused:
                    turn.applied.append("reflect")
                    turn.decisions.append({**_decision_entry(decision, round_, call), "action": "reflect",
                                           "reason": "the model answered in words instead of a new call"})
                if isinstance(text, str) and text:
                    turn.notes.append(text)
                return turn
            if len(new) > self.max_calls:
                raise _Refused(self._failed("too_many_calls", 502, f"the upstream's answer has {len(new)} tool calls, "
                                                                   f"more than the {self.max_calls} a reply may carry"))
            pending = new

    def _outcome(self, call: Any, decision: Any, turn: _Turn, seen: set[bytes], ids: set[Any]) -> str:
        """Apply one decision to `turn`; the text the model reads about it if it is asked again."""
        name = _quoted(decision.tool)
        action = decision.action
        if action in ("allow", "modify"):
            sent = call if action == "allow" else _as_openai(decision.call, call)
            key = _identity(sent)
            if key in seen:  # the model proposed a call it already has: keep the first
                return f"The call to {name} was already accepted; do not propose it again."
            seen.add(key)
            if isinstance(sent, dict) and sent.get("id") in ids:  # one id per call in the final reply
                sent = {**sent, "id": f"{sent['id']}_{len(turn.calls)}"}
            if isinstance(sent, dict):
                ids.add(sent.get("id"))
            turn.calls.append(sent)
            turn.applied.append(action)
            return _note(f"The call to {name} was accepted and will run when this turn ends; do not propose it again.")
        if action == "escalate":
            self._escalate(call, decision, turn)
            return _note(f"The call to {name} is waiting for a person's approval; do not propose it again.")
        if action == "deny":
            self._deny(decision, turn)
            return _note(f"The call to {name} was blocked and will not run.")
        return decision.feedback or decision.reason

    def _fallback(self, call: Any, decision: Any, turn: _Turn) -> None:
        if self.upstream.reflect_fallback == "escalate":
            self._escalate(call, decision, turn)
        else:
            self._deny(decision, turn)

    @staticmethod
    def _escalate(call: Any, decision: Any, turn: _Turn) -> None:
        turn.applied.append("escalate")
        turn.escalated.append({"call": call, "feedback": decision.feedback, "reason": decision.reason})
        turn.notes.append(_note(f"The call to {_quoted(decision.tool)} is waiting for a person's approval "
                                f"({_plain(decision.reason)})."))

    @staticmethod
    def _deny(decision: Any, turn: _Turn) -> None:
        turn.applied.append("deny")
        turn.notes.append(_note(f"The call to {_quoted(decision.tool)} was blocked by reflection ({_plain(decision.reason)})."))

    # --- streaming --------------------------------------------------------------------------

    async def _stream(self, raw: bytes, body: dict[str, Any], headers: dict[str, str], secrets: list[bytes],
                      started: float | None, deadline: float | None) -> Response:
        response = await self._send(raw, {**headers, "content-type": "application/json"})
        if isinstance(response, Response):
            return response
        if response.status != 200:
            status, upstream_headers = response.status, response.headers
            return _unchanged(status, upstream_headers, await self._read(response), secrets)
        keep = _downstream(response.headers)
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
                except _Refused as refused:
                    failure = None
                    yield _event(_error_event(refused.response))
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
        chunk = _read_reply(payload.encode())
        if chunk is _UNREADABLE:
            raise _Refused(_problem(502, "the upstream sent an event that is not JSON, so the tool calls in it could "
                                         "not be checked"))
        if not isinstance(chunk, dict) or not isinstance(chunk.get("choices"), list) or not chunk["choices"]:
            if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict) and usage:
                chunk["usage"] = _usage_sum(chunk["usage"], usage)  # the usage chunk: every round's
            yield event.encode(_reply_text(chunk))
            return
        base = {k: v for k, v in chunk.items() if k != "choices"}
        for choice in chunk["choices"]:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            if type(index) is not int:
                raise _Refused(_problem(502, "the upstream sent a choice whose index is not an integer"))
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
        turn = _Turn()
        calls = state.calls()
        if calls:
            turn = await self._settle(calls, body, headers, secrets, started, budget)
        if state.unreadable:
            turn.applied.append("deny")
            turn.notes.append(_note("A tool call the gateway could not read was removed."))
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
        report = _report([turn])
        usage.extend(turn.usage)
        if isinstance(base.get("usage"), dict):
            base = {**base, "usage": _usage_sum(base["usage"], turn.usage)}
        yield _event({**base, "choices": [{**out, "finish_reason": finish}], "reflection": report})


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
                    raise _Refused(_problem(502, f"the upstream's answer has more than {self.max_calls} tool calls"))
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

_UNREADABLE: Any = object()


def _lenient(raw: bytes) -> Any:
    """JSON as Python's reader (and so the OpenAI SDK and most servers) reads it: NaN, Infinity
    and lone surrogates accepted. `_UNREADABLE` when even that fails."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return _UNREADABLE


def _read_reply(content: bytes) -> Any:
    try:
        return parse_json(content)
    except ValueError:
        return _lenient(content)


def _lenient_dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


def _reply_bytes(data: Any) -> bytes:
    """JSON bytes; a reply read leniently (NaN, a lone surrogate) is written back the way it came."""
    try:
        return dumps(data).encode()
    except (TypeError, ValueError, UnicodeEncodeError):
        return _lenient_dumps(data).encode()


def _reply_text(data: Any) -> str:
    return _reply_bytes(data).decode()


def _decompressed(raw: bytes, encoding: str, limit: int) -> bytes:
    """The request body decoded, at most `limit` bytes (a small bomb must not become a large body)."""
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise _Refused(_problem(415, f"{_plain(encoding, 40)!r} encoding is not supported"))
    wbits = 16 + zlib.MAX_WBITS if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
    try:
        inflater = zlib.decompressobj(wbits)
        out = inflater.decompress(raw, limit + 1)
    except zlib.error:
        raise _Refused(_problem(400, f"the request body is not valid {encoding}")) from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise _Refused(_problem(413, f"the decoded request body is larger than {limit} bytes (service.max_body_bytes)"))
    return out


def _message_calls(message: dict[str, Any]) -> list[Any] | None:
    """The calls a reply message carries (a legacy `function_call` as one call), or None."""
    calls = message.get("tool_calls")
    legacy = message.get("function_call")
    if legacy is not None:
        call = {"id": None, "type": "function", "function": legacy, "_legacy": True}
        calls = [*calls, call] if isinstance(calls, list) else [call]
    if calls is None or calls == []:
        return None
    if not isinstance(calls, list):
        raise _Refused(_problem(502, "the upstream's message has tool_calls that are not a list, so they could "
                                     "not be checked"))
    return calls


def _messages(body: dict[str, Any]) -> list[Any]:
    messages = body.get("messages")
    return list(messages) if isinstance(messages, list) else []


def _first_message(reply: dict[str, Any]) -> dict[str, Any] | None:
    try:
        message = reply["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    return message if isinstance(message, dict) else None


def _wire(call: Any, fallback_id: str) -> dict[str, Any]:
    """A call as the upstream reads it in a re-ask's history: OpenAI shape, with an id."""
    out = {k: v for k, v in call.items() if k != "_legacy"} if isinstance(call, dict) else {"type": "function"}
    if not isinstance(out.get("id"), str) or not out["id"]:
        out["id"] = fallback_id
    return out


def _call_id(call: Any) -> Any:
    return call.get("id") if isinstance(call, dict) else None


def _identity(call: Any) -> bytes:
    """What makes two calls the same call: the tool and its arguments (read, not as written)."""
    function = call.get("function", call) if isinstance(call, dict) else {}
    arguments = function.get("arguments") if isinstance(function, dict) else None
    if isinstance(arguments, str):
        parsed = _read_reply(arguments.encode())
        arguments = arguments if parsed is _UNREADABLE else parsed
    name = function.get("name") if isinstance(function, dict) else None
    return _reply_bytes([name, arguments])


def _as_openai(corrected: Any, original: Any) -> dict[str, Any]:
    """The corrected call in the OpenAI shape, with the original call's id and arguments as JSON text."""
    function = corrected.get("function", corrected) if isinstance(corrected, dict) else {}
    arguments = function.get("arguments", {})
    out = dict(original) if isinstance(original, dict) else {"type": "function"}
    out["function"] = {"name": function.get("name"), "arguments": arguments if isinstance(arguments, str) else dumps(arguments)}
    return out


def _quoted(name: Any) -> str:
    return dumps(_plain(str(name), 120) or "(no name)")


def _note(text: str) -> str:
    """A line the gateway writes into a conversation: remembered, so it never counts as evidence."""
    remember(text)
    return text


def _apply(choice: dict[str, Any], message: dict[str, Any], turn: _Turn) -> None:
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


def _decision_entry(decision: Any, round_: int, call: Any) -> dict[str, Any]:
    return {"round": round_, "tool": decision.tool, "call_id": _call_id(call), "action": decision.action,
            "reason": decision.reason, "feedback": decision.feedback, "shadow_action": decision.shadow_action}


def _report(turns: list[_Turn]) -> dict[str, Any]:
    return {"actions": [a for t in turns for a in t.applied], "rounds": sum(t.rounds for t in turns),
            "decisions": [d for t in turns for d in t.decisions],
            "escalated": [e for t in turns for e in t.escalated],
            "reask_usage": [u for t in turns for u in t.usage]}


def _usage_sum(first: Any, more: list[Any]) -> Any:
    """`first` (a Chat Completions usage) with every numeric top-level field of `more` added."""
    if not more:
        return first
    out = dict(first) if isinstance(first, dict) else {}
    for usage in more:
        if not isinstance(usage, dict):
            continue
        for key, value in usage.items():
            if type(value) is int and type(out.get(key, 0)) is int:
                out[key] = out.get(key, 0) + value
    return out


def _add_usage(data: dict[str, Any], turns: list[_Turn]) -> None:
    more = [u for t in turns for u in t.usage]
    if more:
        data["usage"] = _usage_sum(data.get("usage"), more)


def _report_headers(report: dict[str, Any]) -> dict[str, str]:
    return {"x-reflection-actions": ",".join(report["actions"]), "x-reflection-rounds": str(report["rounds"])}


def _downstream(headers: Any, *, keep_encoding: bool = False) -> dict[str, str]:
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
                  out_headers.get("authorization")):
        if value:
            token = value.partition(" ")[2] if value.lower().startswith("bearer ") else value
            if len(token.strip()) >= 8:
                found.append(token.strip().encode("latin-1", "replace"))
    return found


def _unchanged(status: int, headers: Any, content: bytes, secrets: list[bytes]) -> Response:
    """The upstream's answer with its status and body (keys redacted), without headers the gateway owns."""
    for secret in secrets:
        content = content.replace(secret, b"[redacted]")
    out = _downstream(headers)
    for key, value in list(out.items()):
        raw = value.encode("latin-1", "replace")
        if any(secret in raw for secret in secrets):
            out[key] = "[redacted]"
    return Response(content, status_code=status, headers=out)


def _error_event(response: Response) -> dict[str, Any]:
    """What ends a stream that cannot go on: the upstream's own error object when it sent one
    (a 429 on a re-ask), else the gateway's reason, in the shape the SDKs raise on."""
    data = _read_reply(bytes(response.body))
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return {"error": {**data["error"], "status": response.status_code}}
    detail = data.get("detail") if isinstance(data, dict) else None
    return {"error": {"message": str(detail or "the upstream's answer could not be passed on"),
                      "type": "reflection_gateway_error", "code": None, "status": response.status_code}}


def _problem(status: int, detail: str) -> Response:
    return Response(dumps({"detail": detail}), status_code=status, media_type="application/json")


def _event(chunk: Any) -> bytes:
    return b"data: " + _reply_bytes(chunk) + b"\n\n"
