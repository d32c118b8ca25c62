"""The request log lines are written a moment after their requests end, and all of them by shutdown."""

from __future__ import annotations

import asyncio
import logging
import time

from starlette.testclient import TestClient

from reflection.config import ReflectionConfig
from reflection.service import app as service_app
from reflection.service._logging import RequestLines

_ROW = {
    "id": "r1",
    "call": {"name": "get_weather", "arguments": {"city": "Paris"}},
    "tools": [{"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
}


def _lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "reflection.service" and r.getMessage() == "request"]


def test_lines_wait_for_their_moment_keep_their_time_and_come_all_at_once(caplog):
    caplog.set_level(logging.INFO, logger="reflection.service")

    async def run() -> tuple[int, float, float]:
        lines = RequestLines(delay=0.05, most=3)
        lines.add({"request_id": "a"})
        ended = time.time()
        lines.add({"request_id": "b"})
        before = len(_lines(caplog))  # nothing written while the request path runs
        await asyncio.sleep(0.2)  # the loop is idle: the timer writes both
        return before, ended, time.time()

    before, ended, after = asyncio.run(run())
    written = _lines(caplog)
    assert before == 0
    assert [r.request_id for r in written] == ["a", "b"]  # type: ignore[attr-defined]
    # Each record has the time its request ended, not the time it was written.
    assert written[0].created <= ended <= written[1].created < after - 0.1
    assert written[0].msecs == (written[0].created - int(written[0].created)) * 1000


def test_a_full_batch_is_written_at_once(caplog):
    caplog.set_level(logging.INFO, logger="reflection.service")

    async def run() -> int:
        lines = RequestLines(delay=3600, most=3)
        for name in "abc":
            lines.add({"request_id": name})
        return len(_lines(caplog))

    assert asyncio.run(run()) == 3


def test_the_waiting_lines_are_written_before_the_service_shuts_down(caplog):
    caplog.set_level(logging.INFO, logger="reflection.service")
    app = service_app.create_app(ReflectionConfig())
    app.lines.delay = 3600  # no timer: only the shutdown writes them
    with TestClient(app) as client:
        for n in range(3):
            assert client.post("/v1/check", json=_ROW, headers={"x-request-id": f"line-{n}"}).status_code == 200
        assert _lines(caplog) == []
    assert [r.request_id for r in _lines(caplog)] == ["line-0", "line-1", "line-2"]  # type: ignore[attr-defined]
    assert {r.route for r in _lines(caplog)} == {"/v1/check"}  # type: ignore[attr-defined]
