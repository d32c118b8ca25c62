"""One pure ASGI middleware for the production manners of every route.

Request id, bearer-key authentication (constant-time), body size limit (413), in-flight limit
(503 with Retry-After), a deadline per request (504), a JSON error instead of a traceback for
anything unexpected (500), metrics, and one JSON log line per request. Pure ASGI rather than
Starlette's `BaseHTTPMiddleware`: it costs a few microseconds per request and never buffers
streamed responses.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import time
import uuid
from collections.abc import Iterable
from typing import Any

from fastapi import HTTPException

from reflection._json import dumps
from reflection.service._logging import request_logger
from reflection.service._metrics import Metrics

__all__ = ["AUTH_HEADER", "OPEN_PATHS", "ServiceMiddleware"]

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect"})
"""Probes, metrics and the API description: served without a key and outside the in-flight limit."""

AUTH_HEADER = "x-reflection-api-key"
LITELLM_AUTH_HEADER = "x-api-key"
"""The header LiteLLM's guardrails send their `api_key` in: accepted as the service key too."""
"""A service key may come here instead of `Authorization`, which the gateway then passes upstream."""

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_QUIET = frozenset({"/healthz", "/readyz", "/metrics"})


class _BodyTooLarge(HTTPException):
    """A request body over `service.max_body_bytes`: 413. An `HTTPException`, so FastAPI's own
    body reader passes it on (it turns any other error into a 400)."""

    def __init__(self, limit: int):
        super().__init__(413, f"request body larger than {limit} bytes (service.max_body_bytes)")


class ServiceMiddleware:
    """Wraps the application; see the module docstring for what it enforces."""

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
    ):
        self.app = app
        self.keys = [key.encode() for key in api_keys]
        self.max_body_bytes = max_body_bytes
        self.max_in_flight = max_in_flight
        self.deadline_seconds = deadline_seconds
        self.metrics = metrics
        self.routes = frozenset(routes)
        self.in_flight = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        path = scope["path"]
        route = path if path in self.routes else "other"
        headers = _headers(scope)
        request_id = headers.get("x-request-id", "")
        if not _REQUEST_ID.fullmatch(request_id):
            request_id = uuid.uuid4().hex
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        # When the request arrived: the gate's deadline counts queueing too, and a stream ends
        # with an error event of its own before this middleware's deadline would cut it.
        state["started"] = started
        state["deadline"] = time.monotonic() + self.deadline_seconds
        response = {"status": 0, "actions": None}

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

        counted = False
        try:
            if path in OPEN_PATHS:
                await self.app(scope, receive, send_with_id)
                return
            refusal = self._refuse(scope, headers)
            if refusal is not None:
                await _send_json(send_with_id, *refusal)
                return
            self.in_flight += 1
            self.metrics.in_flight.inc()
            counted = True
            await self._handle(scope, receive, send_with_id, response)
        finally:
            if counted:
                self.in_flight -= 1
                self.metrics.in_flight.dec()
            elapsed = time.perf_counter() - started
            self.metrics.observe_request(route, response["status"], elapsed)
            if path not in _QUIET and request_logger.isEnabledFor(logging.INFO):
                # makeRecord + handle is `info()` without its walk up the stack for the caller's
                # file and line, which the request line never shows.
                request_logger.handle(request_logger.makeRecord(
                    request_logger.name, logging.INFO, __file__, 0, "request", (), None, extra={
                        "request_id": request_id, "method": scope["method"], "route": route,
                        "status": response["status"], "duration_ms": round(elapsed * 1000, 3),
                        "client": (scope.get("client") or ("", 0))[0], "actions": response["actions"],
                    },
                ))

    def _refuse(self, scope: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any], dict[str, str]] | None:
        """A (status, body, headers) answer for a request that must not reach the application."""
        if self.keys:
            source = _authenticate(headers, self.keys)
            if source is None:
                return 401, {"detail": "missing or invalid API key: send 'Authorization: Bearer <key>' "
                                       f"or '{AUTH_HEADER}: <key>'"}, {"www-authenticate": "Bearer"}
            scope["state"]["auth_header"] = source
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            return 413, {"detail": f"request body larger than {self.max_body_bytes} bytes (service.max_body_bytes)"}, {}
        if self.in_flight >= self.max_in_flight:
            return 503, {"detail": f"busy: {self.max_in_flight} requests in flight (service.max_in_flight); retry shortly"}, \
                {"retry-after": "1"}
        return None

    async def _handle(self, scope: dict[str, Any], receive: Any, send: Any, response: dict[str, Any]) -> None:
        received = 0

        async def limited_receive() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise _BodyTooLarge(self.max_body_bytes)
            return message

        try:
            # asyncio's own timeout (uvicorn runs asyncio): a few times cheaper than anyio's scope.
            async with asyncio.timeout(self.deadline_seconds):
                await self.app(scope, limited_receive, send)
        except _BodyTooLarge as exc:
            if not response["status"]:
                await _send_json(send, 413, {"detail": exc.detail}, {})
        except TimeoutError:
            if not response["status"]:
                await _send_json(send, 504, {"detail": f"the request took longer than its deadline of "
                                                       f"{self.deadline_seconds:g} s (service.deadline_seconds)"}, {})
        except Exception:  # noqa: BLE001 - a bug: answer without a traceback, log the type and message
            request_logger.exception("unhandled error", extra={"request_id": scope["state"]["request_id"]})
            if not response["status"]:
                await _send_json(send, 500, {"detail": "internal error; the service log has it under this request id",
                                             "request_id": scope["state"]["request_id"]}, {})


def _headers(scope: dict[str, Any]) -> dict[str, str]:
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers", [])}


def _authenticate(headers: dict[str, str], keys: list[bytes]) -> str | None:
    """The header that carried a valid key ("authorization" or AUTH_HEADER), or None.

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
        matched = False
        for key in keys:
            matched |= hmac.compare_digest(presented, key)
        if matched:
            return header
    return None


async def _send_json(send: Any, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
    data = dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})
