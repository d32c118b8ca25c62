"""Shared fixtures: every test runs offline; judges are mocked at the HTTP layer."""

import importlib

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


def pytest_runtest_setup(item):
    """`patches_module(name)` tests count calls by patching the module's functions: a build whose
    module is compiled by mypyc (a wheel built by hatch_build.py) calls them directly."""
    marker = item.get_closest_marker("patches_module")
    if marker is not None and not importlib.import_module(marker.args[0]).__file__.endswith(".py"):
        pytest.skip(f"{marker.args[0]} is compiled: its functions call each other directly, not through patches")
