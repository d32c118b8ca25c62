"""Prometheus metrics of the service (`GET /metrics`).

With several workers (`reflection serve --workers N`), `PROMETHEUS_MULTIPROC_DIR` is set by the
command before the workers start, and `/metrics` adds up every worker's samples.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from reflection.model import JudgeUsage, ReflectionResult

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    """The service's counters and histograms, registered on one registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("reflection_http_requests", "HTTP requests by route and status.", ["route", "status"], registry=r)
        self.latency = Histogram("reflection_http_request_duration_seconds", "HTTP request latency by route.", ["route"],
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self.in_flight = Gauge("reflection_http_in_flight", "Requests being handled.", registry=r,
                               multiprocess_mode="livesum")
        self.decisions = Counter("reflection_decisions", "Gate decisions by action (and the shadow action in shadow mode).",
                                 ["action", "shadow_action"], registry=r)
        self.decision_latency = Histogram("reflection_decision_duration_seconds", "Time to a gate decision.",
                                          buckets=_LATENCY_BUCKETS, registry=r)
        self.reflections = Counter("reflection_reflections", "Calls reflected, by verdict.", ["overall_valid"], registry=r)
        self.judge_requests = Counter("reflection_judge_requests", "Requests sent to the judge.", registry=r)
        self.judge_tokens = Counter("reflection_judge_tokens", "Judge tokens by kind.", ["kind"], registry=r)
        self.judge_cost = Counter("reflection_judge_cost_usd", "Judge cost in USD.", registry=r)
        self.connections_closed = Counter(
            "reflection_connections_closed", "Client connections the server closed before a request was under way, "
            "by reason: header_timeout, header_too_large, evicted (idle, at the connection cap), refused (at the cap).",
            ["reason"], registry=r)
        self.upstream = Counter("reflection_upstream_requests", "Gateway requests to the upstream model by status.",
                                ["status"], registry=r)
        self._request_children: dict[tuple[str, int], tuple[Any, Any]] = {}
        self._decision_children: dict[tuple[str, str], Any] = {}
        self._verdict_children: dict[str, Any] = {}
        self.upstream_latency = Histogram("reflection_upstream_duration_seconds", "Upstream model latency.",
                                          buckets=_LATENCY_BUCKETS, registry=r)

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        """Count one HTTP request and its latency."""
        key = (route, status)
        children = self._request_children.get(key)
        if children is None:  # labels() costs tens of microseconds; a route has few statuses
            children = self._request_children[key] = (self.requests.labels(route, str(status)), self.latency.labels(route))
        children[0].inc()
        children[1].observe(seconds)

    def observe_usage(self, usage: JudgeUsage) -> None:
        """Count one reflection's judge traffic."""
        if usage.requests:
            self.judge_requests.inc(usage.requests)
            self.judge_tokens.labels("prompt").inc(usage.prompt_tokens)
            self.judge_tokens.labels("completion").inc(usage.completion_tokens)
            self.judge_tokens.labels("cached").inc(usage.cached_tokens)
            if usage.cost_usd is not None:  # unknown price: the counter stays a sum of known costs
                self.judge_cost.inc(usage.cost_usd)

    def observe_results(self, results: list[ReflectionResult]) -> None:
        """Count reflected calls and their judge traffic."""
        for result in results:
            verdict = str(result.overall_valid).lower()
            child = self._verdict_children.get(verdict)
            if child is None:
                child = self._verdict_children[verdict] = self.reflections.labels(verdict)
            child.inc()
            self.observe_usage(result.usage)

    def observe_decision(self, decision: Any) -> None:
        """Count one gate decision, its latency and its judge traffic."""
        key = (decision.action, decision.shadow_action or "")
        child = self._decision_children.get(key)
        if child is None:
            child = self._decision_children[key] = self.decisions.labels(*key)
        child.inc()
        self.decision_latency.observe(decision.latency_ms / 1000)
        if decision.result is not None:
            self.observe_results([decision.result])

    def render(self) -> bytes:
        """The exposition text: this process's metrics, or every worker's in multiprocess mode."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)
