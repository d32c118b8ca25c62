"""One pure ASGI middleware for the production manners of every route.

Request id, bearer-key authentication (constant-time; two credentials of one kind are refused as
ambiguous) naming the request's tenant, body size limit (413) and body time limit (408), in-flight limits overall and per key
(503 with Retry-After), a deadline per request (504), a JSON error instead of a traceback for
anything unexpected (500), metrics, and one JSON log line per request (written a moment after the
request ends, off the path of the next one: `RequestLines`). Pure ASGI rather than
Starlette's `BaseHTTPMiddleware`: it costs a few microseconds per request and never buffers
streamed responses.

A request counts as in flight only once its whole body has arrived: the middleware reads the body
(within `service.body_timeout_seconds` and `service.max_body_bytes`) before the application
starts, so a client trickling bodies holds connections, never the in-flight places of others.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from reflection._json import dumps
from reflection.config import DEFAULT_TENANT
from reflection.service._logging import RequestLines, request_logger
from reflection.service._metrics import Metrics

__all__ = ["ARRIVED", "AUTH_HEADER", "OPEN_PATHS", "TENANT", "ServiceMiddleware", "arrival"]

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect"})
"""Probes, metrics and the API description: served without a key and outside the in-flight limit."""

AUTH_HEADER = "x-reflection-api-key"
LITELLM_AUTH_HEADER = "x-api-key"
"""The header LiteLLM's guardrails send their `api_key` in: accepted as the service key too."""
"""A service key may come here instead of `Authorization`, which the gateway then passes upstream."""

ARRIVED = "arrived_at"
DEADLINE = "deadline"
"""The scope state key of the request's deadline (`time.monotonic()`)."""
"""The `scope["state"]` key of the moment (`time.perf_counter()`) the request's body had fully
arrived: set by the server's connection protocol when it runs under `reflection serve`, else by
this middleware. Deadlines count from it, so time spent queueing counts against them."""

TENANT = "tenant"
"""The `scope["state"]` key of the name of the request's tenant: the tenant of the key that
authenticated it, or `default` when no keys are configured. Absent before authentication."""

_CREDENTIALS = frozenset({"authorization", AUTH_HEADER, LITELLM_AUTH_HEADER})
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_QUIET = frozenset({"/healthz", "/readyz", "/metrics"})


def arrival(scope: Mapping[str, Any]) -> float:
    """When the request's body had fully arrived (`time.perf_counter()`), for deadlines that
    should cover queueing; now, for a request the middleware has not read."""
    arrived = scope.get("state", {}).get(ARRIVED)
    return arrived if arrived is not None else time.perf_counter()


class ServiceMiddleware:
    """Wraps the application; see the module docstring for what it enforces.

    `key_tenants` names the tenant of each of `api_keys` (same order; default: all `default`).
    With a tenant other than `default`, metrics and log lines carry the tenant's name."""

    def __init__(
        self,
        app: Any,
        *,
        api_keys: Iterable[str],
        max_body_bytes: int,
        max_in_flight: int,
        deadline_seconds: float,
        metrics: Metrics,
        routes: Iterable[str],
        max_in_flight_per_key: int | None = None,
        body_timeout_seconds: float = 30.0,
        key_tenants: Sequence[str] | None = None,
    ):
        self.app = app
        self.keys = [key.encode() for key in api_keys]
        self.key_tenant = list(key_tenants) if key_tenants is not None else [DEFAULT_TENANT] * len(self.keys)
        if len(self.key_tenant) != len(self.keys):
            raise ValueError("key_tenants must name one tenant per API key")
        self.tenanted = any(name != DEFAULT_TENANT for name in self.key_tenant)
        """Whether tenants are named in metrics and logs (only when some are configured, so a
        service without them reports exactly as before)."""
        self.max_body_bytes = max_body_bytes
        self.max_in_flight = max_in_flight
        self.deadline_seconds = deadline_seconds
        self.body_timeout_seconds = body_timeout_seconds
        self.metrics = metrics
        self.routes = frozenset(routes)
        self.in_flight = 0
        self.per_key: int | None = None
        """In flight (and bodies being received) per key; None without keys."""
        if self.keys:
            self.per_key = max_in_flight_per_key or max(1, max_in_flight // len(self.keys))
        self.key_in_flight = [0] * len(self.keys)
        self.key_receiving = [0] * len(self.keys)
        self.lines = RequestLines()
        """The request log lines, written a moment after their requests end (see `RequestLines`)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, self._flushing(send) if scope["type"] == "lifespan" else send)
            return
        started = time.perf_counter()
        path = scope["path"]
        route = path if path in self.routes else "other"
        headers, ambiguous = _headers(scope)
        request_id = headers.get("x-request-id", "")
        if not _REQUEST_ID.fullmatch(request_id):
            request_id = uuid.uuid4().hex
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        response: dict[str, Any] = {"status": 0, "actions": None}

        async def send_with_id(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                response["status"] = message["status"]
                out = list(message.get("headers", []))
                out.append((b"x-request-id", request_id.encode()))
                for name, value in out:
                    if name == b"x-reflection-actions":
                        response["actions"] = value.decode("latin-1")
                message = {**message, "headers": out}
            await send(message)

        if not self.keys:
            state[TENANT] = DEFAULT_TENANT
        try:
            if path in OPEN_PATHS:
                await self.app(scope, receive, send_with_id)
                return
            refusal = self._refuse(scope, headers, ambiguous)
            if refusal is not None:
                await _send_json(send_with_id, *refusal)
                return
            await self._handle(scope, receive, send_with_id, response, scope["state"].get("key_index"))
        finally:
            elapsed = time.perf_counter() - started
            tenant = state.get(TENANT) if self.tenanted and path not in OPEN_PATHS else None
            self.metrics.observe_request(route, response["status"], elapsed, tenant or "")
            if path not in _QUIET and request_logger.isEnabledFor(logging.INFO):
                self.lines.add(
                    {
                        "request_id": request_id,
                        "method": scope["method"],
                        "route": route,
                        "status": response["status"],
                        "duration_ms": round(elapsed * 1000, 3),
                        "client": (scope.get("client") or ("", 0))[0],
                        "actions": response["actions"],
                        "tenant": tenant,
                    }
                )

    def _flushing(self, send: Any) -> Any:
        """The lifespan's `send`, writing the waiting request lines before the shutdown completes."""

        async def send_after_flush(message: dict[str, Any]) -> None:
            if message["type"].startswith("lifespan.shutdown"):
                self.lines.flush()
            await send(message)

        return send_after_flush

    def _refuse(
        self, scope: dict[str, Any], headers: dict[str, str], ambiguous: bool
    ) -> tuple[int, dict[str, Any], dict[str, str]] | None:
        """A (status, body, headers) answer for a request that must not reach the application,
        decided from its headers alone (before its body is read)."""
        if ambiguous:
            # Which one counts? Auth would read one and the gateway forward another: refuse both.
            return (
                400,
                {
                    "detail": "ambiguous credentials: more than one Authorization or "
                    f"{AUTH_HEADER} header; send each at most once"
                },
                {},
            )
        if self.keys:
            found = _authenticate(headers, self.keys)
            if found is None:
                return (
                    401,
                    {
                        "detail": "missing or invalid API key: send 'Authorization: Bearer <key>' "
                        f"or '{AUTH_HEADER}: <key>'"
                    },
                    {"www-authenticate": "Bearer"},
                )
            state = scope["state"]
            state["auth_header"], state["key_index"] = found
            state[TENANT] = self.key_tenant[found[1]]
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            # The body is never read: close, so its bytes are not read and thrown away either.
            return (
                413,
                {"detail": f"request body larger than {self.max_body_bytes} bytes (service.max_body_bytes)"},
                {"connection": "close"},
            )
        key = scope["state"].get("key_index")
        if key is not None and self.key_receiving[key] >= self.per_key:
            return (
                503,
                {
                    "detail": f"busy: this API key is sending {self.key_receiving[key]} request bodies at once, "
                    "its share (service.max_in_flight_per_key); retry shortly"
                },
                {"retry-after": "1"},
            )
        return self._busy(key)

    def _busy(self, key: int | None) -> tuple[int, dict[str, Any], dict[str, str]] | None:
        """503 when the worker, or this key's share of it, has no room for one more request."""
        if key is not None and self.key_in_flight[key] >= self.per_key:  # type: ignore[operator]
            return (
                503,
                {
                    "detail": f"busy: this API key has {self.key_in_flight[key]} requests in flight, its share "
                    "(service.max_in_flight_per_key); retry shortly"
                },
                {"retry-after": "1"},
            )
        if self.in_flight >= self.max_in_flight:
            return (
                503,
                {"detail": f"busy: {self.max_in_flight} requests in flight (service.max_in_flight); retry shortly"},
                {"retry-after": "1"},
            )
        return None

    async def _handle(
        self, scope: dict[str, Any], receive: Any, send: Any, response: dict[str, Any], key: int | None
    ) -> None:
        """Read the body (408, 413), admit the request (503), then run the application (504, 500)."""
        state = scope["state"]
        loop = asyncio.get_running_loop()
        arrived = state.get(ARRIVED)
        receiving = counted = False
        if arrived is None:  # the body may still be on its way: its own time limit first
            phase, when = "body", loop.time() + self.body_timeout_seconds
        else:  # the server has seen the whole body: reading it cannot wait, the deadline runs already
            phase, when = "app", loop.time() + self.deadline_seconds - (time.perf_counter() - arrived)
        try:
            # asyncio's own timeout (uvicorn runs asyncio): a few times cheaper than anyio's scope.
            async with asyncio.timeout_at(when) as timer:
                if arrived is None and key is not None:
                    self.key_receiving[key] += 1
                    receiving = True
                message = await receive()
                if message["type"] == "http.request" and not message.get("more_body", False):
                    body: bytes | None = message.get("body", b"")
                    if len(body) > self.max_body_bytes:  # type: ignore[arg-type]
                        await self._too_large(send)
                        body = None
                else:
                    body = await self._read_rest(message, receive, send)
                if receiving:
                    self.key_receiving[key] -= 1  # type: ignore[index]
                    receiving = False
                if body is None:  # answered (413), or the client went away
                    return
                refusal = self._busy(key)
                if refusal is not None:
                    await _send_json(send, *refusal)
                    return
                self.in_flight += 1
                if key is not None:
                    self.key_in_flight[key] += 1
                self.metrics.in_flight.inc()
                counted = True
                if arrived is None:
                    state[ARRIVED] = time.perf_counter()
                    phase = "app"
                    timer.reschedule(loop.time() + self.deadline_seconds)
                # A stream ends with an error event of its own before this deadline would cut it
                # (the loop's clock is time.monotonic).
                state[DEADLINE] = timer.when()
                await self.app(scope, _replay(body, receive), send)
        except TimeoutError:
            if response["status"]:
                pass
            elif phase == "body":
                await _send_json(
                    send,
                    408,
                    {
                        "detail": f"the request body did not arrive within "
                        f"{self.body_timeout_seconds:g} s (service.body_timeout_seconds)"
                    },
                    {"connection": "close"},
                )
            else:
                await _send_json(
                    send,
                    504,
                    {
                        "detail": f"the request took longer than its deadline of "
                        f"{self.deadline_seconds:g} s (service.deadline_seconds)"
                    },
                    {},
                )
        except Exception:  # noqa: BLE001 - a bug: answer without a traceback, log the type and message
            request_logger.exception(
                "unhandled error",
                extra={"request_id": state["request_id"], "tenant": state.get(TENANT) if self.tenanted else None},
            )
            if not response["status"]:
                await _send_json(
                    send,
                    500,
                    {
                        "detail": "internal error; the service log has it under this request id",
                        "request_id": state["request_id"],
                    },
                    {},
                )
        finally:
            if receiving:
                self.key_receiving[key] -= 1  # type: ignore[index]
            if counted:
                self.in_flight -= 1
                if key is not None:
                    self.key_in_flight[key] -= 1
                self.metrics.in_flight.dec()

    async def _read_rest(self, first: dict[str, Any], receive: Any, send: Any) -> bytes | None:
        """The whole request body from its `first` message on, or None once answered with 413 or
        when the client went away."""
        chunks: list[bytes] = []
        size = 0
        message = first
        while True:
            if message["type"] != "http.request":
                return None  # http.disconnect: nobody to answer
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > self.max_body_bytes:
                    await self._too_large(send)
                    return None
                chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            message = await receive()

    async def _too_large(self, send: Any) -> None:
        # Close: the rest of the body is never read, so it is not read and thrown away either.
        await _send_json(
            send,
            413,
            {"detail": f"request body larger than {self.max_body_bytes} bytes (service.max_body_bytes)"},
            {"connection": "close"},
        )


def _replay(body: bytes, receive: Any) -> Any:
    """A `receive` that hands the application the body already read, then waits on the client's
    (for `http.disconnect`, which streamed responses listen for)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> dict[str, Any]:
        if pending:
            return pending.pop()
        return await receive()

    return replay


def _headers(scope: dict[str, Any]) -> tuple[dict[str, str], bool]:
    """The request's headers by lowercase name (the last of repeated ones), and whether a
    credential header came more than once."""
    raw = scope.get("headers", [])
    out = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in raw}
    if len(out) == len(raw):  # no name repeated: the usual case
        return out, False
    names = [name.decode("latin-1").lower() for name, _ in raw]
    return out, any(names.count(name) > 1 for name in _CREDENTIALS)


def _authenticate(headers: dict[str, str], keys: list[bytes]) -> tuple[str, int] | None:
    """The header that carried a valid key ("authorization" or AUTH_HEADER) and that key's index
    among `keys`, or None.

    Every configured key is compared, in constant time, whatever matched first."""
    for header in (AUTH_HEADER, "authorization", LITELLM_AUTH_HEADER):
        value = headers.get(header)
        if value is None:
            continue
        if header == "authorization":
            scheme, _, value = value.partition(" ")
            if scheme.lower() != "bearer":
                continue
        presented = value.strip().encode("latin-1")
        index = -1
        for i, key in enumerate(keys):
            if hmac.compare_digest(presented, key):
                index = i
        if index >= 0:
            return header, index
    return None


async def _send_json(send: Any, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
    data = dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})
