"""The judge's transport: its default HTTP client, many small connection pools instead of one big one.

httpcore 1.0's pool does work quadratic in its size on every request and response
(`_assign_requests_to_connections` counts idle connections once per idle connection and
probes every idle socket), so at 64 connections the pool alone costs several milliseconds
of CPU per judge request (encode/httpcore#1035, unmerged). Spreading the same number of
connections over pools of two keeps each pass tiny. It stays an ordinary `httpx` transport,
so respx (and `reflection.testing.FakeJudge`) still intercepts it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx

__all__ = ["PER_POOL", "ShardedTransport", "judge_http_client"]

PER_POOL = 2
"""Connections per inner pool: measured best at 64 concurrent requests (see bench_batch.py)."""


class _CountedStream(httpx.AsyncByteStream):
    """A response body that tells its pool's load counter when it is closed."""

    def __init__(self, stream: httpx.AsyncByteStream, done: Callable[[], None]):
        self._stream = stream
        self._done: Callable[[], None] | None = done

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            if self._done is not None:
                done, self._done = self._done, None
                done()


class ShardedTransport(httpx.AsyncBaseTransport):
    """`connections` connections spread over pools of `per_pool`; each request goes to the
    pool with the fewest requests in flight (counted until the response body is closed)."""

    def __init__(self, connections: int, *, per_pool: int = PER_POOL):
        pools = max(1, -(-connections // per_pool))
        limits = httpx.Limits(max_connections=per_pool, max_keepalive_connections=per_pool)
        tls = httpx.create_ssl_context()  # one for all pools: loading the CA bundle takes ~30 ms each time
        self._pools = [httpx.AsyncHTTPTransport(limits=limits, verify=tls) for _ in range(pools)]
        self._load = [0] * pools

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        i = min(range(len(self._load)), key=self._load.__getitem__)
        self._load[i] += 1

        def done() -> None:
            self._load[i] -= 1

        try:
            response = await self._pools[i].handle_async_request(request)
        except BaseException:
            done()
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_CountedStream(response.stream, done),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


def judge_http_client(connections: int, timeout: float) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` for a judge allowing `connections` requests at once."""
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout), transport=ShardedTransport(connections))
