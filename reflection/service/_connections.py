"""Connections that cannot be hoarded: uvicorn's httptools protocol with a time and size limit on
request headers and a cap on open connections, for `reflection serve`.

uvicorn closes a kept-alive connection that stays idle after a response (`timeout_keep_alive`),
but a connection that never sends a request, or sends its headers a byte at a time, is kept for
good and needs no key; its headers may grow without bound; and `limit_concurrency` counts idle
connections too, so hoarded ones would make it refuse every real request. Here:

- a request's line and headers must arrive within `service.header_timeout_seconds` of the
  connection opening, or of the first byte of a later request on a kept-alive connection; else
  408 and the connection is closed;
- they may hold at most `service.max_header_bytes`; else 431 and the connection is closed;
- at most `service.max_connections` connections are open per worker: a new one beyond that
  closes the longest-idle connection (no request under way: not yet sent, partly sent, or kept
  alive between requests); with none idle, the new one gets 503 and is closed. The cap is kept
  under the open-file limit (raised to its hard limit when that helps), so accepting never
  fails for want of descriptors;
- the moment a request's body has fully arrived is written to `scope["state"]` (`ARRIVED`), so
  the service's deadlines count the time a request waits for the event loop.

Bodies are the middleware's concern (`service.body_timeout_seconds`, `max_body_bytes`): by then
the request is authenticated and can be answered in JSON.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from reflection.service._middleware import ARRIVED

__all__ = ["FD_RESERVE", "GuardedHttpToolsProtocol", "Limits", "configure", "limits"]

logger = logging.getLogger("reflection.service")
_now = time.perf_counter

FD_RESERVE = 64
"""Descriptors kept for what is not a client connection (log files, the metrics directory, the
listening socket), besides one per in-flight request for its judge or upstream connection."""


@dataclass
class Limits:
    """What `GuardedHttpToolsProtocol` enforces (in seconds and bytes); `configure` sets them."""

    header_timeout: float = 10.0
    max_header_bytes: int = 65536
    max_connections: int = 1024
    metrics: Any = None


limits = Limits()
"""This worker process's limits (one server per process)."""


def configure(service: Any, metrics: Any = None) -> int:
    """Take the limits from a `ServiceConfig` (and count closed connections on `metrics`); returns
    the connection cap in force, lowered to what the open-file limit can hold."""
    limits.header_timeout = service.header_timeout_seconds
    limits.max_header_bytes = service.max_header_bytes
    limits.metrics = metrics
    limits.max_connections = _fit_file_limit(service.max_connections, service.max_in_flight + FD_RESERVE)
    return limits.max_connections


def _fit_file_limit(wanted: int, reserve: int) -> int:
    """`wanted` connections, raising the soft open-file limit toward the hard one if needed, or as
    many as the limit leaves room for beside `reserve` (at least 1), with a warning."""
    try:
        import resource
    except ImportError:  # not POSIX: no limit to read
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + reserve
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= need:
        return wanted
    fitted = max(1, soft - reserve)
    logger.warning(
        f"the open-file limit ({soft}) holds {fitted} client connections beside {reserve} for requests' "
        f"own connections, not service.max_connections={wanted}; raise it (ulimit -n {need}, or LimitNOFILE "
        "in a systemd unit) to allow them",
        extra={"event": "connection_cap_lowered"},
    )
    return fitted


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits above (`reflection serve` passes it as `http`)."""

    # Per server (one per worker process): the connections with no request under way, oldest first.
    _idle_by_server: ClassVar[dict[int, OrderedDict[GuardedHttpToolsProtocol, None]]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._idle = self._idle_by_server.setdefault(id(self.server_state), OrderedDict())
        self._header_timer: Any = None
        self._header_scope: Any = None  # the request whose header bytes are being counted
        self._header_bytes = 0
        self._read_size = 0  # of the read being parsed
        self._too_large = False

    # --- the connection ---------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        if len(self.connections) > limits.max_connections and not self._evict_idle():
            self._close_with(
                503,
                "the server is at its connection cap (service.max_connections); retry shortly",
                "refused",
                b"retry-after: 1\r\n",
            )
            return
        self._idle[self] = None
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._idle.pop(self, None)
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._read_size = len(data)
        super().data_received(data)
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope and not cycle.response_complete:
            return  # the usual case: a request under way, its headers complete
        if self.transport.is_closing():
            return
        if self._in_headers():
            # Counted per read, not per parsed header: httptools keeps a header's partial value to
            # itself until it is whole, so a header trickled forever would never reach on_header.
            if self.scope is not self._header_scope:
                self._header_scope, self._header_bytes = self.scope, 0
            self._header_bytes += len(data)
            if self._header_bytes > limits.max_header_bytes:
                self._headers_too_large()
                return
        # Bytes with no request under way (the next request's first ones, or bytes the parser
        # skips): its headers' time starts now. A request under way is the deadline's business.
        if self._header_timer is None and not self._busy():
            self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._idle.pop(self, None)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        # Headers that came whole in one large read were never counted: count them (rarely needed).
        if (
            self._read_size > limits.max_header_bytes
            and len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
            > limits.max_header_bytes
        ):
            self._too_large = True
            raise ValueError("request headers too large")  # stops httptools; uvicorn calls send_400_response
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        if self._too_large:
            self._headers_too_large()
            return
        super().send_400_response(msg)

    def on_message_complete(self) -> None:
        self.scope["state"][ARRIVED] = _now()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # then the next request starts now: not idle
        super().on_response_complete()
        if pipelined or self.transport.is_closing():
            return
        self._idle[self] = None  # newest idle (on_headers_complete took it out)
        if self.cycle.scope is not self.scope:  # the next request had begun arriving meanwhile
            self._arm_header_timer()

    # --- helpers ------------------------------------------------------------------------

    def _busy(self) -> bool:
        """A request is under way: its headers parsed and its answer not yet sent in full."""
        return self.cycle is not None and not self.cycle.response_complete

    def _in_headers(self) -> bool:
        """A request has begun arriving and its headers are not yet complete."""
        return self.scope is not None and (self.cycle is None or self.cycle.scope is not self.scope)

    def _headers_too_large(self) -> None:
        self._close_with(
            431,
            f"request headers larger than {limits.max_header_bytes} bytes (service.max_header_bytes)",
            "header_too_large",
        )

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(limits.header_timeout, self._header_deadline)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_deadline(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self._busy():
            return  # a request is under way; on_response_complete re-arms if the next one is partial
        if self.cycle is not None and not self._in_headers():
            return  # kept alive between requests: uvicorn's keep-alive timeout closes it
        # A request begun and not finished hears why; a connection that sent nothing is just closed.
        self._close_with(
            408,
            f"no complete request headers within {limits.header_timeout:g} s (service.header_timeout_seconds)",
            "header_timeout",
            answer=self._in_headers(),
        )

    def _evict_idle(self) -> bool:
        """Close the longest-idle other connection; False when none is idle."""
        for other in self._idle:
            if other is not self:
                # Kept alive between requests: closed as a keep-alive timeout would close it.
                other._close_with(
                    503,
                    "closed for a new connection at the connection cap (service.max_connections)",
                    "evicted",
                    b"retry-after: 1\r\n",
                    answer=other._in_headers(),
                )
                return True
        return False

    def _close_with(self, status: int, detail: str, reason: str, extra: bytes = b"", *, answer: bool = True) -> None:
        """Answer `status` with a JSON problem (when `answer`) and close the connection; no request
        is under way on it."""
        self._idle.pop(self, None)
        self._cancel_header_timer()
        if self.transport.is_closing():
            return
        if answer:
            body = b'{"detail":"' + detail.encode() + b'"}'
            head = STATUS_LINE[status] + b"content-type: application/json\r\nconnection: close\r\n" + extra
            self.transport.write(head + b"content-length: %d\r\n\r\n" % len(body) + body)
        self.transport.close()
        if limits.metrics is not None:
            limits.metrics.connections_closed.labels(reason).inc()
