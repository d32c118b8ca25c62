"""The OpenAI-compatible gateway: `POST /v1/chat/completions` forwarded to the upstream model, with
every tool call in the reply gated before the client sees it.

- Every request is forwarded as it came (a re-ask is the gateway's own request). A request
  without `tools` is answered byte for byte (streamed or not).
- An upstream error (any status but 200) reaches the client unchanged: status, body, headers.
- Each tool call of the reply is gated with the request's `messages` as history and its `tools`
  as specs. `allow`: passed through. `modify`: the verified correction replaces it. `reflect`:
  the model is asked again with the call and the feedback as the tool's result (up to
  `upstream.max_reflect_rounds` times), and what it answers replaces the call; when the rounds
  run out, the call gets `upstream.reflect_fallback` (`deny` by default). `deny`: the call is removed and the
  message says why. `escalate`: the call is removed from `tool_calls` and returned under
  `reflection.escalated` for a person to approve.
- The reply carries a `reflection` field (every decision, in order, with its round) and the
  headers `X-Reflection-Actions` (the applied action per call) and `X-Reflection-Rounds`.
- `stream: true`: text deltas pass through as they arrive; each tool call's deltas are held
  until the call is complete, then it is gated and sent whole (or not). The `reflection` field
  rides on the chunk that carries `finish_reason`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import anyio
from starlette.responses import Response, StreamingResponse

from reflection._json import dumps, parse_json, parse_json_keeping
from reflection.config import UpstreamConfig
from reflection.service._middleware import AUTH_HEADER

__all__ = ["Gateway"]

# Not forwarded either way: connection-level headers, and what the gateway sets itself.
_HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "host", "content-length",
})
_NOT_UPSTREAM = _HOP_BY_HOP | {"authorization", AUTH_HEADER, "accept-encoding", "cookie"}
_NOT_DOWNSTREAM_DECODED = _HOP_BY_HOP | {"content-encoding"}
_TOOLS = frozenset({"tools"})


@dataclasses.dataclass
class _Outcome:
    """What happens to one call of the model's reply after the gate (and any re-asks)."""

    call: dict[str, Any] | None
    """The call to send to the client (None: removed)."""
    applied: str
    """allow, modify, deny, escalate (reflect ends in one of these)."""
    tool: str
    text: str | None = None
    """What the message tells the user about a removed call, or the model's own words after a re-ask."""
    escalated: dict[str, Any] | None = None


@dataclasses.dataclass
class _Reply:
    """The upstream's whole answer to a request (body read, decoded)."""

    status_code: int
    headers: Any
    content: bytes


class _Turn:
    """The gating of one choice: decisions made (for the `reflection` field) and re-asks used."""

    def __init__(self) -> None:
        self.decisions: list[dict[str, Any]] = []
        self.rounds = 0


class Gateway:
    """Forwards Chat Completions to `upstream` and gates the tool calls in the replies, with up to
    `connections` upstream requests at once (or on `session`, which the caller closes).

    The upstream client is aiohttp rather than httpx: with its C parser and a flat connection
    pool it costs about a sixth of httpx's CPU per request (56 vs 341 us measured against the
    stand-in model), which is most of what the gateway adds. Create it inside a running event loop.
    """

    def __init__(self, upstream: UpstreamConfig, gate: Any, metrics: Any, *, connections: int = 256,
                 session: aiohttp.ClientSession | None = None):
        self.upstream = upstream
        self.gate = gate
        self.metrics = metrics
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
        try:
            # `tools` stays JSON text: the gate's spec cache is keyed by it, so a client that sends
            # the same tools on every request has them read once.
            body = parse_json_keeping(raw, _TOOLS)
        except ValueError:
            body = None
        if not isinstance(body, dict) or body.get("tools", b"").strip() in (b"", b"[]", b"null"):
            if "accept-encoding" in headers:  # the bytes go back as they come: in an encoding the client takes
                out_headers["accept-encoding"] = headers["accept-encoding"]
            return await self._pass_through(raw, out_headers)
        if body.get("stream"):
            return await self._stream(raw, body, out_headers)
        return await self._complete(raw, body, out_headers)

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

    async def _post(self, content: bytes, headers: dict[str, str]) -> _Reply | Response:
        """POST a JSON body and read the whole answer."""
        response = await self._send(content, {**headers, "content-type": "application/json"})
        if isinstance(response, Response):
            return response
        try:
            return _Reply(response.status, response.headers, await response.read())
        except TimeoutError:
            return self._failed("timeout", 504, f"the upstream model stopped answering for {self.upstream.timeout:g} s "
                                                "(upstream.timeout)")
        except aiohttp.ClientError as exc:
            return self._failed("unreachable", 502, f"the upstream model's answer broke off: {type(exc).__name__}")
        finally:
            response.release()

    async def _pass_through(self, raw: bytes, headers: dict[str, str]) -> Response:
        """Forward the request as it came and stream the answer back as it comes, bytes unchanged."""
        response = await self._send(raw, headers, decode=False)
        if isinstance(response, Response):
            return response

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.content.iter_any():
                    yield chunk
            finally:
                response.release()

        keep = {k: v for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP}
        return StreamingResponse(body(), status_code=response.status, headers=keep)

    # --- plain completions ------------------------------------------------------------------

    async def _complete(self, raw: bytes, body: dict[str, Any], headers: dict[str, str]) -> Response:
        response = await self._post(raw, headers)
        if isinstance(response, Response):
            return response
        if response.status_code != 200:
            return _unchanged(response)
        try:
            data = parse_json(response.content)
        except ValueError:
            return _unchanged(response)
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list):
            return _unchanged(response)
        turns: list[_Turn] = []
        applied: list[str] = []
        escalated: list[dict[str, Any]] = []
        for choice in choices:
            message = choice.get("message") if isinstance(choice, dict) else None
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            if not isinstance(calls, list) or not calls:
                continue
            turn = _Turn()
            turns.append(turn)
            outcomes = await self._settle(calls, body, headers, turn)
            _apply(choice, message, outcomes)
            applied += [o.applied for o in outcomes]
            escalated += [o.escalated for o in outcomes if o.escalated]
        report = _report(turns, applied, escalated)
        data["reflection"] = report
        keep = {k: v for k, v in response.headers.items() if k.lower() not in _NOT_DOWNSTREAM_DECODED}
        return Response(dumps(data), status_code=200, headers={**keep, **_report_headers(report)},
                        media_type="application/json")

    async def _settle(self, calls: list[Any], body: dict[str, Any], headers: dict[str, str], turn: _Turn,
                      round_: int = 0, messages: list[Any] | None = None) -> list[_Outcome]:
        """Gate `calls` (one reply's) and resolve each decision into outcomes, re-asking for refused calls."""
        history = messages if messages is not None else _messages(body)
        decisions = await self.gate.check(list(calls), body.get("tools"), history)
        for decision in decisions:
            self.metrics.observe_decision(decision)
            turn.decisions.append(_decision_entry(decision, round_))
        results: list[list[_Outcome]] = [[] for _ in calls]

        async def resolve(i: int, call: Any, decision: Any) -> None:
            results[i] = await self._resolve(call, decision, body, headers, turn, round_, history)

        pairs = list(enumerate(zip(calls, decisions, strict=True)))
        reasks = sum(d.action == "reflect" and round_ < self.upstream.max_reflect_rounds for d in decisions)
        if reasks <= 1:  # nothing to wait for side by side: no task group (its tasks cost more than the gate)
            for i, (call, decision) in pairs:
                await resolve(i, call, decision)
        else:
            async with anyio.create_task_group() as tg:
                for i, (call, decision) in pairs:
                    tg.start_soon(resolve, i, call, decision)
        return [outcome for group in results for outcome in group]

    async def _resolve(self, call: Any, decision: Any, body: dict[str, Any], headers: dict[str, str], turn: _Turn,
                       round_: int, history: list[Any]) -> list[_Outcome]:
        action = decision.action
        if action == "allow":
            return [_Outcome(call, "allow", decision.tool)]
        if action == "modify":
            return [_Outcome(_as_openai(decision.call, call), "modify", decision.tool)]
        if action == "escalate":
            return [_escalated(call, decision)]
        if action == "reflect" and round_ < self.upstream.max_reflect_rounds:
            return await self._reask(call, decision, body, headers, turn, round_, history)
        if action == "reflect" and self.upstream.reflect_fallback == "escalate":
            return [_escalated(call, decision)]
        return [_denied(decision)]

    async def _reask(self, call: Any, decision: Any, body: dict[str, Any], headers: dict[str, str], turn: _Turn,
                     round_: int, history: list[Any]) -> list[_Outcome]:
        """Ask the model again with its refused call and the feedback as that call's result."""
        call_id = call.get("id") if isinstance(call, dict) else None
        messages = [*history, {"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": call_id or "call", "content": decision.feedback or decision.reason}]
        again = {k: v for k, v in body.items() if k not in ("stream", "stream_options", "n")}
        again["messages"] = messages
        again["tools"] = parse_json(body["tools"])
        turn.rounds += 1
        response = await self._post(dumps(again).encode(), headers)
        reply = _first_message(response)
        if reply is None:
            status = response.status_code
            return [_denied(decision, note=f"asking the model again failed (HTTP {status})")]
        calls = reply.get("tool_calls")
        if not isinstance(calls, list) or not calls:
            # The model answered in words instead (e.g. asking the user for a missing value).
            return [_Outcome(None, "reflect", decision.tool, text=reply.get("content") or None)]
        return await self._settle(calls, body, headers, turn, round_ + 1, messages)

    # --- streaming --------------------------------------------------------------------------

    async def _stream(self, raw: bytes, body: dict[str, Any], headers: dict[str, str]) -> Response:
        response = await self._send(raw, {**headers, "content-type": "application/json"})
        if isinstance(response, Response):
            return response
        if response.status != 200:
            try:
                return _unchanged(_Reply(response.status, response.headers, await response.read()))
            finally:
                response.release()
        keep = {k: v for k, v in response.headers.items() if k.lower() not in _NOT_DOWNSTREAM_DECODED}
        keep["x-reflection-gate"] = "streamed; see the reflection field on the finish chunk"
        return StreamingResponse(self._relay(response, body, headers), status_code=200, headers=keep,
                                 media_type="text/event-stream")

    async def _relay(self, response: aiohttp.ClientResponse, body: dict[str, Any],
                     headers: dict[str, str]) -> AsyncIterator[bytes]:
        """The upstream's events, with each tool call held until complete, gated, then sent."""
        choices: dict[int, _StreamChoice] = {}
        try:
            async for line in _lines(response):
                if not line.startswith("data:"):
                    if line:
                        yield (line + "\n\n").encode()
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    yield b"data: [DONE]\n\n"
                    continue
                try:
                    chunk = parse_json(payload)
                except ValueError:
                    yield (line + "\n\n").encode()
                    continue
                if not isinstance(chunk, dict) or not isinstance(chunk.get("choices"), list) or not chunk["choices"]:
                    yield _event(chunk)  # e.g. the usage chunk
                    continue
                async for event in self._relay_chunk(chunk, choices, body, headers):
                    yield event
        finally:
            response.release()

    async def _relay_chunk(self, chunk: dict[str, Any], choices: dict[int, _StreamChoice], body: dict[str, Any],
                           headers: dict[str, str]) -> AsyncIterator[bytes]:
        base = {k: v for k, v in chunk.items() if k != "choices"}
        for choice in chunk["choices"]:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            state = choices.setdefault(index, _StreamChoice())
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            for part in delta.get("tool_calls") or []:
                if not isinstance(part, dict):
                    continue
                position = part.get("index", 0)
                if state.current is not None and position != state.current:
                    async for event in self._release(state, base, index, body, headers):
                        yield event
                state.take(position, part)
            rest = {k: v for k, v in delta.items() if k != "tool_calls"}
            finish = choice.get("finish_reason")
            if finish is not None:
                async for event in self._release(state, base, index, body, headers):
                    yield event
                if state.notes:
                    yield _event({**base, "choices": [{"index": index, "delta": {"content": "\n\n" + "\n".join(state.notes)},
                                                       "finish_reason": None}]})
                if finish == "tool_calls" and state.sent == 0:
                    finish = "stop"
                out = {**choice, "delta": rest, "finish_reason": finish}
                report = _report([state.turn], state.applied, state.escalated)
                yield _event({**base, "choices": [out], "reflection": report})
            elif rest or "tool_calls" not in delta:
                yield _event({**base, "choices": [{**choice, "delta": rest}]})

    async def _release(self, state: _StreamChoice, base: dict[str, Any], index: int, body: dict[str, Any],
                       headers: dict[str, str]) -> AsyncIterator[bytes]:
        """Gate the call being assembled and send what comes of it."""
        call = state.pop()
        if call is None:
            return
        outcomes = await self._settle([call], body, headers, state.turn)
        for outcome in outcomes:
            state.applied.append(outcome.applied)
            if outcome.escalated:
                state.escalated.append(outcome.escalated)
            if outcome.text:
                state.notes.append(outcome.text)
            if outcome.call is not None:
                function = outcome.call.get("function", {})
                delta = {"tool_calls": [{"index": state.sent, "id": outcome.call.get("id"), "type": "function",
                                         "function": {"name": function.get("name"), "arguments": function.get("arguments")}}]}
                state.sent += 1
                yield _event({**base, "choices": [{"index": index, "delta": delta, "finish_reason": None}]})


class _StreamChoice:
    """One streamed choice: the tool call being assembled, and what was decided so far."""

    def __init__(self) -> None:
        self.current: int | None = None
        self.call: dict[str, Any] | None = None
        self.sent = 0
        self.turn = _Turn()
        self.applied: list[str] = []
        self.escalated: list[dict[str, Any]] = []
        self.notes: list[str] = []

    def take(self, position: int, part: dict[str, Any]) -> None:
        """Add one tool-call delta to the call at `position`."""
        if self.call is None:
            self.current = position
            self.call = {"id": part.get("id"), "type": part.get("type") or "function", "function": {"name": "", "arguments": ""}}
        if part.get("id"):
            self.call["id"] = part["id"]
        function = part.get("function") or {}
        if function.get("name"):
            self.call["function"]["name"] += function["name"]
        if isinstance(function.get("arguments"), str):
            self.call["function"]["arguments"] += function["arguments"]

    def pop(self) -> dict[str, Any] | None:
        """The assembled call (None when none is pending); the next delta starts a new one."""
        call, self.call, self.current = self.call, None, None
        return call


# --- helpers ------------------------------------------------------------------------------------


async def _lines(response: aiohttp.ClientResponse) -> AsyncIterator[str]:
    """The body's lines as text, without their ends, however long (aiohttp's own line reader
    refuses lines beyond its buffer)."""
    pending = bytearray()
    async for data in response.content.iter_any():
        pending += data
        if b"\n" not in data:  # a long line in many pieces: split once, when it ends
            continue
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r").decode("utf-8", "replace")
    if pending:
        yield pending.rstrip(b"\r").decode("utf-8", "replace")


def _messages(body: dict[str, Any]) -> list[Any]:
    messages = body.get("messages")
    return list(messages) if isinstance(messages, list) else []


def _first_message(response: _Reply | Response) -> dict[str, Any] | None:
    if isinstance(response, Response) or response.status_code != 200:
        return None
    try:
        data = parse_json(response.content)
        message = data["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return message if isinstance(message, dict) else None


def _as_openai(corrected: Any, original: Any) -> dict[str, Any]:
    """The corrected call in the OpenAI shape, with the original call's id and arguments as JSON text."""
    function = corrected.get("function", corrected) if isinstance(corrected, dict) else {}
    arguments = function.get("arguments", {})
    out = dict(original) if isinstance(original, dict) else {"type": "function"}
    out["function"] = {"name": function.get("name"), "arguments": arguments if isinstance(arguments, str) else dumps(arguments)}
    return out


def _escalated(call: Any, decision: Any) -> _Outcome:
    return _Outcome(None, "escalate", decision.tool, text=f"The call to {decision.tool} is waiting for approval.",
                    escalated={"call": call, "feedback": decision.feedback, "reason": decision.reason})


def _denied(decision: Any, note: str | None = None) -> _Outcome:
    why = decision.feedback or decision.reason
    if note:
        why = f"{why} ({note})"
    return _Outcome(None, "deny", decision.tool, text=f"The call to {decision.tool} was not run: {why}")


def _apply(choice: dict[str, Any], message: dict[str, Any], outcomes: list[_Outcome]) -> None:
    """Put the outcomes into the reply's message: kept calls, and text for removed ones."""
    calls = [o.call for o in outcomes if o.call is not None]
    notes = [o.text for o in outcomes if o.text]
    if notes:
        message["content"] = "\n\n".join([message["content"], *notes] if message.get("content") else notes)
    if calls:
        message["tool_calls"] = calls
    else:
        message.pop("tool_calls", None)
        if choice.get("finish_reason") == "tool_calls":
            choice["finish_reason"] = "stop"


def _decision_entry(decision: Any, round_: int) -> dict[str, Any]:
    call = decision.call if isinstance(decision.call, dict) else {}
    return {"round": round_, "tool": decision.tool, "call_id": call.get("id"), "action": decision.action,
            "reason": decision.reason, "feedback": decision.feedback, "shadow_action": decision.shadow_action}


def _report(turns: list[_Turn], applied: list[str], escalated: list[dict[str, Any]]) -> dict[str, Any]:
    return {"actions": applied, "rounds": sum(t.rounds for t in turns),
            "decisions": [d for t in turns for d in t.decisions], "escalated": escalated}


def _report_headers(report: dict[str, Any]) -> dict[str, str]:
    return {"x-reflection-actions": ",".join(report["actions"]), "x-reflection-rounds": str(report["rounds"])}


def _unchanged(response: _Reply) -> Response:
    """The upstream's answer as it was: status, body and headers (decoded body, so no content-encoding)."""
    keep = {k: v for k, v in response.headers.items() if k.lower() not in _NOT_DOWNSTREAM_DECODED}
    return Response(response.content, status_code=response.status_code, headers=keep)


def _problem(status: int, detail: str) -> Response:
    return Response(dumps({"detail": detail}), status_code=status, media_type="application/json")


def _event(chunk: Any) -> bytes:
    return b"data: " + dumps(chunk).encode() + b"\n\n"
