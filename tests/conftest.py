"""Shared fixtures: every test runs offline; judges are mocked at the HTTP layer."""

import pytest

from reflection.judge import client as judge_module


@pytest.fixture(autouse=True)
def _fresh_endpoint_modes():
    """Structured-output negotiation is remembered per endpoint; isolate tests from each other."""
    judge_module._ENDPOINT_MODES.clear()
    yield
    judge_module._ENDPOINT_MODES.clear()


@pytest.fixture(autouse=True)
def _no_real_api_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for name in list(__import__("os").environ):
        if name.startswith("REFLECTION_"):
            monkeypatch.delenv(name)
