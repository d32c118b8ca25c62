"""The gateway's transport to the upstream model, below every API module (`gateway`, `_responses`,
`_anthropic`): the upstream HTTP client with its bounds, and the headers and bodies that go back
to the client unchanged (keys redacted, the headers the gateway owns left out).

The upstream client is aiohttp rather than httpx: with its C parser and a flat connection pool it
costs about a sixth of httpx's CPU per request (56 vs 341 us measured against the stand-in model),
which is most of what the gateway adds. Create it inside a running event loop.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from starlette.responses import Response, StreamingResponse

from reflection._slices import let_go
from reflection._text import plain_line
from reflection.config import UpstreamConfig
from reflection.service._dialects import Dialect, Refused, problem, read_reply, usage_sum
from reflection.service._metrics import TenantMetrics

__all__ = ["HOP_BY_HOP", "UpstreamClient", "add_usage", "decompressed", "downstream", "unchanged"]

# Not forwarded either way: connection-level headers, and what the gateway sets itself.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
# A connection that broke before any answer (`ClientConnectorError`, also a `ClientOSError`, is one
# that could not be made: "unreachable", not retried).
_DROPPED = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)

# What the client gets from the gateway only: its own report, cookies, transport security, CORS,
# and the date (its server writes one on every answer; two would be one header with two dates).
_GATEWAY_OWNED = frozenset({"set-cookie", "set-cookie2", "strict-transport-security", "alt-svc", "date"})
_PLAIN = ("", "identity")  # the content-encodings of a body sent as it is


class UpstreamClient:
    """POSTs to the upstream (`config.base_url`, `config.anthropic_base_url`) with up to
    `connections` requests at once (or on `session`, which the caller closes), every answer
    read within `config.max_response_bytes` and `config.timeout`, and counted in `metrics`."""

    def __init__(
        self,
        config: UpstreamConfig,
        metrics: TenantMetrics,
        *,
        connections: int = 256,
        session: aiohttp.ClientSession | None = None,
    ):
        self.config = config
        self.metrics = metrics
        self.anthropic_url = config.anthropic_base_url.rstrip("/") if config.anthropic_base_url else None
        self._owns_session = session is None
        # upstream.timeout bounds each wait for data, as httpx's read timeout did, not the whole reply.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=config.timeout)
        self.session = session or aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections, limit_per_host=connections),
            timeout=timeout,
            skip_auto_headers=("content-type",),  # a body is sent with the client's content type or none, as it came
            # No cookie jar: a cookie the upstream sets for one client must not ride on another's request.
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    async def aclose(self) -> None:
        """Close the HTTP session if this client created it."""
        if self._owns_session:
            await self.session.close()

    def url_for(self, dialect: Dialect) -> str:
        """The upstream URL of `dialect`'s endpoint."""
        if dialect.path == "/messages":
            assert self.anthropic_url is not None  # the route answers 404 without one
            return self.anthropic_url + dialect.path
        return self.config.base_url.rstrip("/") + dialect.path

    async def send(
        self, url: str, content: bytes, headers: dict[str, str], *, decode: bool = True
    ) -> aiohttp.ClientResponse | Response:
        """POST to the upstream: its response (body unread; `decode=False` keeps a compressed body
        compressed), or the problem answer (504, 502) when it could not be had."""
        started = time.perf_counter()
        try:
            try:
                response = await self.session.post(url, data=content, headers=headers, auto_decompress=decode)
            except _DROPPED as exc:
                if isinstance(exc, aiohttp.ClientConnectorError):
                    raise  # never connected: unreachable, not dropped
                # Closed before it answered: most often a kept-alive connection the upstream had just
                # timed out (uvicorn keeps one 5 s, the pool 15 s), so the request never reached it.
                # Once more on a new connection, as the OpenAI and Anthropic SDKs retry a dropped
                # connection; a model request runs no tool, so a rare repeat costs tokens only.
                response = await self.session.post(url, data=content, headers=headers, auto_decompress=decode)
        except TimeoutError:  # aiohttp's connect and read timeouts are TimeoutErrors
            return self.failed(
                "timeout", 504, f"the upstream model did not answer within {self.config.timeout:g} s (upstream.timeout)"
            )
        except aiohttp.ClientError as exc:
            return self.failed(
                "unreachable",
                502,
                f"the upstream model at {url.rsplit('/', 1)[0]} could not be reached: {type(exc).__name__}",
            )
        self.metrics.upstream.labels(str(response.status)).inc()
        self.metrics.upstream_latency.observe(time.perf_counter() - started)
        return response

    async def forward(
        self, url: str, content: bytes, headers: dict[str, str], secrets: list[bytes]
    ) -> aiohttp.ClientResponse | Response:
        """POST a JSON request: the upstream's 200 response (body unread), or what the client gets
        instead (the problem answer, or the upstream's error answer as `unchanged` gives it)."""
        response = await self.send(url, content, {**headers, "content-type": "application/json"})
        if isinstance(response, Response):
            return response
        if response.status != 200:
            status, upstream_headers = response.status, response.headers
            return unchanged(status, upstream_headers, await self.read(response), secrets)
        return response

    def failed(self, label: str, status: int, detail: str) -> Response:
        """The gateway's problem answer, counted in the upstream metrics under `label`."""
        self.metrics.upstream.labels(label).inc()
        return problem(status, detail)

    async def read(self, response: aiohttp.ClientResponse) -> bytes:
        """The whole body, at most `upstream.max_response_bytes`; raises `Refused` past it or when it breaks."""
        limit = self.config.max_response_bytes
        too_large = f"the upstream's answer is larger than {limit} bytes (upstream.max_response_bytes)"
        chunks: list[bytes] = []
        size = 0
        try:
            declared = response.content_length
            if declared is not None and response.headers.get("content-encoding", "").strip().lower() in _PLAIN:
                # What is read is what is declared (a compressed body is counted decoded, below).
                if declared <= limit:
                    return await response.read()  # one read: aiohttp stops at the declared length
                response.close()  # refused before a byte of it is read; the connection is not pooled
                raise Refused(self.failed("too_large", 502, too_large))
            async for data in response.content.iter_any():
                chunks.append(data)
                size += len(data)
                if size > limit:
                    await let_go(chunks)
                    raise Refused(self.failed("too_large", 502, too_large))
        except TimeoutError:
            raise Refused(
                self.failed(
                    "timeout",
                    504,
                    f"the upstream model stopped answering for {self.config.timeout:g} s (upstream.timeout)",
                )
            ) from None
        except aiohttp.ClientError as exc:
            raise Refused(
                self.failed("unreachable", 502, f"the upstream model's answer broke off: {type(exc).__name__}")
            ) from None
        finally:
            response.release()
        return b"".join(chunks)

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
            raise Refused(
                self.failed(
                    "unreadable",
                    502,
                    "the upstream's answer is not a JSON object, so the tool calls in it could not be checked",
                )
            )
        return data

    async def pass_through(self, url: str, raw: bytes, headers: dict[str, str], secrets: list[bytes]) -> Response:
        """Forward the request as it came and stream the answer back as it comes, bytes unchanged."""
        response = await self.send(url, raw, headers, decode=False)
        if isinstance(response, Response):
            return response
        if response.status != 200:  # an error may echo a key: read it (bounded), decode it and redact
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            content = await self.read(response)
            if encoding not in _PLAIN:
                try:
                    content = decompressed(content, encoding, self.config.max_response_bytes)
                except Refused:
                    return self.failed(
                        "unreadable",
                        502,
                        f"the upstream answered HTTP {response.status} in an encoding the gateway cannot read",
                    )
            return unchanged(response.status, response.headers, content, secrets)

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.content.iter_any():
                    yield chunk
            finally:
                response.release()

        return StreamingResponse(
            body(), status_code=response.status, headers=downstream(response.headers, keep_encoding=True)
        )


def decompressed(raw: bytes, encoding: str, limit: int) -> bytes:
    """A body decoded, at most `limit` bytes (a small bomb must not become a large body)."""
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise Refused(problem(415, f"{plain_line(encoding, 40)!r} encoding is not supported"))
    wbits = 16 + zlib.MAX_WBITS if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
    try:
        inflater = zlib.decompressobj(wbits)
        out = inflater.decompress(raw, limit + 1)
    except zlib.error:
        raise Refused(problem(400, f"the request body is not valid {encoding}")) from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise Refused(problem(413, f"the decoded request body is larger than {limit} bytes (service.max_body_bytes)"))
    return out


def downstream(headers: Any, *, keep_encoding: bool = False) -> dict[str, str]:
    """The upstream's headers the client may get: not hop-by-hop ones (nor those `Connection`
    names), not those the gateway owns (its `x-reflection-*` report, cookies, HSTS, CORS)."""
    named = (
        {token.strip().lower() for value in headers.getall("connection", []) for token in value.split(",")}
        if hasattr(headers, "getall")
        else set()
    )
    out = {}
    for key, value in headers.items():
        lower = key.lower()
        if (
            lower in HOP_BY_HOP
            or lower in _GATEWAY_OWNED
            or lower in named
            or lower.startswith(("x-reflection-", "access-control-"))
        ):
            continue
        if lower == "content-encoding" and not keep_encoding:
            continue
        out[key] = value
    return out


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


def add_usage(data: dict[str, Any], usage: list[Any]) -> None:
    """Add the re-asks' `usage` objects to the reply's own `usage`."""
    if usage:
        data["usage"] = usage_sum(data.get("usage"), usage)
