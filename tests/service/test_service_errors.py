"""A bug in a route: the client gets a JSON 500 naming the request id, never a traceback."""

from __future__ import annotations

import asyncio

import httpx
import pytest

pytest.importorskip("fastapi")

from reflection.config import ReflectionConfig  # noqa: E402
from reflection.service import app as service_app  # noqa: E402

ROW = {
    "id": "r",
    "call": {"name": "get_weather", "arguments": {"city": "Paris"}},
    "tools": [{"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
}


def test_an_unexpected_error_in_a_route_is_a_json_500_with_the_request_id(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("secret-looking detail")

    monkeypatch.setattr(service_app, "check_call", broken)
    app = service_app.create_app(ReflectionConfig())

    async def post() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            return await client.post("/v1/check", json=ROW, headers={"x-request-id": "req-42"})

    response = asyncio.run(post())
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "detail": "internal error; the service log has it under this request id",
        "request_id": "req-42",
    }
    assert response.headers["x-request-id"] == "req-42"
    assert "secret-looking" not in response.text
