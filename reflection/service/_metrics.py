"""Prometheus metrics of the service (`GET /metrics`).

With several workers (`reflection serve --workers N`), `PROMETHEUS_MULTIPROC_DIR` is set by the
command before the workers start, and `/metrics` adds up every worker's samples.

With `service.tenants` configured, the request, decision, reflection, judge and upstream metrics
carry a `tenant` label (the tenant's configured name, `default` for `service.api_keys`, empty for
a request no key authenticated), so its values are bounded by the configuration, never chosen by
a client; keys never appear. Without tenants the label is absent and the metrics are as before.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from reflection.model import JudgeUsage, ReflectionResult

__all__ = ["CONTENT_TYPE_LATEST", "Metrics", "TenantMetrics"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    """The service's counters and histograms, registered on one registry. `tenants`: whether the
    per-tenant metrics have a `tenant` label (see the module docstring)."""

    def __init__(self, *, tenants: bool = False) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.tenant_label = tenants
        r = self.registry
        t = ["tenant"] if tenants else []
        self.requests = Counter(
            "reflection_http_requests", "HTTP requests by route and status.", ["route", "status", *t], registry=r
        )
        self.latency = Histogram(
            "reflection_http_request_duration_seconds",
            "HTTP request latency by route.",
            ["route", *t],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "reflection_http_in_flight", "Requests being handled.", registry=r, multiprocess_mode="livesum"
        )
        self.decisions = Counter(
            "reflection_decisions",
            "Gate decisions by action (and the shadow action in shadow mode).",
            [*t, "action", "shadow_action"],
            registry=r,
        )
        self.decision_latency = Histogram(
            "reflection_decision_duration_seconds", "Time to a gate decision.", t, buckets=_LATENCY_BUCKETS, registry=r
        )
        self.reflections = Counter(
            "reflection_reflections", "Calls reflected, by verdict.", [*t, "overall_valid"], registry=r
        )
        self.judge_requests = Counter("reflection_judge_requests", "Requests sent to the judge.", t, registry=r)
        self.judge_tokens = Counter("reflection_judge_tokens", "Judge tokens by kind.", [*t, "kind"], registry=r)
        self.judge_cost = Counter("reflection_judge_cost_usd", "Judge cost in USD.", t, registry=r)
        self.connections_closed = Counter(
            "reflection_connections_closed",
            "Client connections the server closed before a request was under way, "
            "by reason: header_timeout, header_too_large, evicted (idle, at the connection cap), refused (at the cap).",
            ["reason"],
            registry=r,
        )
        self.upstream = Counter(
            "reflection_upstream_requests",
            "Gateway requests to the upstream model by status.",
            [*t, "status"],
            registry=r,
        )
        self.upstream_latency = Histogram(
            "reflection_upstream_duration_seconds", "Upstream model latency.", t, buckets=_LATENCY_BUCKETS, registry=r
        )
        self._request_children: dict[tuple[str, int, str], tuple[Any, Any]] = {}
        self._tenants: dict[str, TenantMetrics] = {}
        self.default = self.for_tenant("default")
        """The metrics of the default tenant (all of them without tenants)."""

    def for_tenant(self, name: str) -> TenantMetrics:
        """The metrics of one tenant's requests (one object per name)."""
        view = self._tenants.get(name)
        if view is None:
            view = self._tenants[name] = TenantMetrics(self, (name,) if self.tenant_label else ())
        return view

    def observe_request(self, route: str, status: int, seconds: float, tenant: str = "") -> None:
        """Count one HTTP request and its latency (`tenant`: its tenant's name, or "" when unknown)."""
        key = (route, status, tenant)
        children = self._request_children.get(key)
        if children is None:  # labels() costs tens of microseconds; a route has few statuses
            labels = (tenant,) if self.tenant_label else ()
            children = self._request_children[key] = (
                self.requests.labels(route, str(status), *labels),
                self.latency.labels(route, *labels),
            )
        children[0].inc()
        children[1].observe(seconds)

    # The default tenant's, for callers that know of no tenants.

    def observe_usage(self, usage: JudgeUsage) -> None:
        """Count one reflection's judge traffic (default tenant)."""
        self.default.observe_usage(usage)

    def observe_result(self, result: ReflectionResult) -> None:
        """Count one reflected call and its judge traffic (default tenant)."""
        self.default.observe_result(result)

    def observe_decision(self, decision: Any) -> None:
        """Count one gate decision, its latency and its judge traffic (default tenant)."""
        self.default.observe_decision(decision)

    def render(self) -> bytes:
        """The exposition text: this process's metrics, or every worker's in multiprocess mode."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)


class _Labelled:
    """A labelled metric with the tenant's label filled in: `labels(status)` as the gateway calls it."""

    def __init__(self, metric: Any, prefix: tuple[str, ...]):
        self._metric = metric
        self._prefix = prefix
        self._children: dict[tuple[str, ...], Any] = {}

    def labels(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*self._prefix, *values)
        return child


def _bound(metric: Any, prefix: Sequence[str]) -> Any:
    """The child of a metric whose only label is the tenant's, or the metric itself without it."""
    return metric.labels(*prefix) if prefix else metric


class TenantMetrics:
    """One tenant's view of `Metrics`, with the same methods and attributes the routes, the
    gateway and the guardrail use (`observe_decision`, `observe_result`, `observe_usage`,
    `upstream`, `upstream_latency`), each counting under the tenant's label."""

    def __init__(self, metrics: Metrics, prefix: tuple[str, ...]):
        self.prefix = prefix
        self.decisions = _Labelled(metrics.decisions, prefix)
        self.reflections = _Labelled(metrics.reflections, prefix)
        self.judge_tokens = _Labelled(metrics.judge_tokens, prefix)
        self.upstream = _Labelled(metrics.upstream, prefix)
        self.decision_latency = _bound(metrics.decision_latency, prefix)
        self.judge_requests = _bound(metrics.judge_requests, prefix)
        self.judge_cost = _bound(metrics.judge_cost, prefix)
        self.upstream_latency = _bound(metrics.upstream_latency, prefix)
        self.in_flight = metrics.in_flight

    def observe_usage(self, usage: JudgeUsage) -> None:
        """Count one reflection's judge traffic."""
        if usage.requests:
            self.judge_requests.inc(usage.requests)
            self.judge_tokens.labels("prompt").inc(usage.prompt_tokens)
            self.judge_tokens.labels("completion").inc(usage.completion_tokens)
            self.judge_tokens.labels("cached").inc(usage.cached_tokens)
            if usage.cost_usd is not None:  # unknown price: the counter stays a sum of known costs
                self.judge_cost.inc(usage.cost_usd)

    def observe_result(self, result: ReflectionResult) -> None:
        """Count one reflected call and its judge traffic."""
        self.reflections.labels(str(result.overall_valid).lower()).inc()
        self.observe_usage(result.usage)

    def observe_decision(self, decision: Any) -> None:
        """Count one gate decision, its latency and its judge traffic."""
        self.decisions.labels(decision.action, decision.shadow_action or "").inc()
        self.decision_latency.observe(decision.latency_ms / 1000)
        if decision.result is not None:
            self.observe_result(decision.result)
