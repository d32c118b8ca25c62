"""The HTTP application: routes translate HTTP to one library call and back.

FastAPI on Starlette, served by uvicorn: FastAPI gives `/openapi.json` from pydantic models,
Starlette streams responses without buffering, and uvicorn (uvloop, httptools) runs several
worker processes and drains in-flight requests on SIGTERM.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.lowlevel
import httpx
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reflection._json import dumps, parse_json
from reflection._slices import mapped
from reflection.config import DEFAULT_TENANT, ReflectionConfig
from reflection.formats import count_calls, count_calls_text, is_parallel, normalize_calls, normalize_tools
from reflection.model import ReflectionResult
from reflection.pipeline import Reflector
from reflection.pipeline import check_static as check_call  # the name /v1/check's one library call goes by
from reflection.results import output_row
from reflection.rows import InputRow, RowError, parse_line, read_row, result_row
from reflection.service import _guardrail
from reflection.service._metrics import CONTENT_TYPE_LATEST, Metrics, TenantMetrics
from reflection.service._middleware import TENANT, ServiceMiddleware, arrival

if TYPE_CHECKING:
    from reflection.gate import Gate
    from reflection.service.gateway import Gateway

__all__ = ["DecisionOut", "ResultRow", "RowIn", "create_app"]

STATIC_ONLY = "static stage only (/v1/check)"
_READY_CACHE_SECONDS = 2.0


class RowIn(BaseModel):
    """A row as `reflection check` reads it. `call` (one call) or `tool_calls` (several) is required."""

    model_config = ConfigDict(extra="allow")
    id: str | int | None = Field(default=None, description="Row id; rows without one are named line-1.")
    call: Any = Field(
        default=None,
        description="The proposed call: OpenAI tool call, Anthropic tool_use, "
        "plain {name, arguments}, or an assistant message with tool_calls.",
    )
    tool_calls: list[Any] | None = Field(default=None, description="Several parallel calls (instead of call).")
    tools: Any = Field(default=None, description="Tool specs: OpenAI, Anthropic, MCP, BFCL or parameter lists.")
    history: Any = Field(default=None, description="The conversation: chat messages, content blocks, or a string.")


class ResultRow(BaseModel):
    """The row `reflection check` writes: id, overall_valid, flat keys, judge_skipped, warnings, usage,
    latency_ms and `results` (the full structured result per call)."""

    model_config = ConfigDict(extra="allow")
    id: str
    overall_valid: bool | None


class DecisionOut(BaseModel):
    """The gate's decision for one call (several calls: `{"id", "decisions": [...]}`)."""

    model_config = ConfigDict(extra="allow")
    id: str | None = None
    action: Literal["allow", "modify", "reflect", "deny", "escalate"] | None = None
    call: Any = None
    feedback: str | None = None
    reason: str | None = None
    result: dict[str, Any] | None = None
    decisions: list[dict[str, Any]] | None = None


class Problem(BaseModel):
    """An error answer: what is wrong and what to do."""

    detail: Any


_ROW_SCHEMA = {**RowIn.model_json_schema(), "anyOf": [{"required": ["call"]}, {"required": ["tool_calls"]}]}
_ROW_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": _ROW_SCHEMA}}}}
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {
        "model": Problem,
        "description": "The body is not JSON, or credentials are ambiguous (a repeated "
        "Authorization or X-Reflection-Api-Key header).",
    },
    401: {"model": Problem, "description": "Missing or invalid API key."},
    408: {"model": Problem, "description": "The body did not arrive within service.body_timeout_seconds."},
    413: {
        "model": Problem,
        "description": "The body is larger than service.max_body_bytes, or it holds more "
        "tool calls than service.max_calls_per_request.",
    },
    422: {"model": Problem, "description": "The row cannot be read: the message says what to fix."},
    503: {
        "model": Problem,
        "description": "Busy (this worker, or this API key's share of it): retry after the "
        "Retry-After header's seconds.",
    },
    504: {"model": Problem, "description": "The request outlived service.deadline_seconds."},
}


class _Tenant:
    """What one tenant's requests are handled with: its configuration (the top-level one with the
    tenant's overrides), gate, reflector, gateway (None without an upstream) and metrics."""

    def __init__(self, config: ReflectionConfig, metrics: TenantMetrics):
        self.config = config
        self.metrics = metrics
        self.gate: Gate | None = None
        self.reflector: Reflector | None = None
        self.gateway: Gateway | None = None


class _State:
    """What one worker holds for its lifetime: each tenant's gate, reflector and gateway, the probe client."""

    def __init__(self, config: ReflectionConfig, metrics: Metrics):
        self.config = config
        self.metrics = metrics
        self.tenants = {DEFAULT_TENANT: _Tenant(config, metrics.for_tenant(DEFAULT_TENANT))}
        for name, tenant in config.service.tenants.items():
            self.tenants[name] = _Tenant(tenant.resolve(name, config), metrics.for_tenant(name))
        self.probe_client: httpx.AsyncClient | None = None
        self.ready_at = 0.0
        self.ready: tuple[bool, dict[str, str]] = (False, {})

    def tenant(self, request: Request) -> _Tenant:
        """The tenant of the key that authenticated `request` (named by `ServiceMiddleware`). Every
        route takes its gate, reflector, gateway and metrics from here, never from another tenant."""
        return self.tenants[request.scope["state"][TENANT]]


async def read_json(request: Request, max_calls: int, member: str | None = None) -> Any:
    """The request body as JSON (strict: NaN and trailing data are errors; big integers exact):
    a row, as `reflection check` reads it (its `tools` member left as JSON text), or with
    `member`, LiteLLM's guardrail request, whose calls are that member's items. A body over
    `_PRECOUNT_BYTES` holding more than `max_calls` calls is refused before it is parsed whole
    (`formats.count_calls_text`), and the event loop gets a turn after it is parsed."""
    body = await request.body()  # over max_body_bytes: the middleware's 413 (an HTTPException)
    large = max_calls > 0 and len(body) > _PRECOUNT_BYTES
    if large:
        _limit_calls(count_calls_text(body, member), max_calls)
    try:
        parsed = parse_line(body) if member is None else parse_json(body)
    except ValueError as exc:
        raise HTTPException(400, f"the body is not valid JSON: {exc}") from None
    if large:
        await anyio.lowlevel.checkpoint()
    return parsed


_PRECOUNT_BYTES = 65536
"""Bodies larger than this have their calls counted before they are parsed whole: parsing 10,000
calls (700 KB) took 3-6 ms in one block, counting them without building them a fifth of that."""


def _read_row(raw: Any, max_calls: int) -> InputRow:
    if isinstance(raw, Mapping):
        rid = raw.get("id")
        if rid is not None and type(rid) not in (str, int):
            # `reflection check` names such a row by its line; here there is no line to name it by.
            raise HTTPException(422, f'"id" must be a string, an integer or null, got {_json_type(rid)}')
    try:
        row = read_row(raw, 1)
    except RowError as exc:
        raise HTTPException(422, str(exc)) from None
    _limit_calls(count_calls(row.call), max_calls)
    return row


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "an array", bool: "a boolean", float: "a number with a fraction"}.get(
        type(value), type(value).__name__
    )


def _limit_calls(count: int, limit: int) -> None:
    if count > limit:
        raise HTTPException(
            413,
            f"{count} tool calls in one request; at most {limit} are checked per request "
            "(service.max_calls_per_request): send them in several requests",
        )


async def _read_guardrail(request: Request, max_calls: int) -> _guardrail.GuardrailRequest:
    """LiteLLM's guardrail request, read as strictly as the other routes' bodies: NaN, Infinity,
    lone surrogates and trailing data are 400 (FastAPI's own reader would accept NaN, then fail to
    write its 422 about it)."""
    raw = await read_json(request, max_calls, "tool_calls")
    try:
        guardrail = _guardrail.GuardrailRequest.model_validate(raw)
    except ValidationError as exc:
        raise HTTPException(422, exc.errors(include_url=False, include_input=False, include_context=False)) from None
    _limit_calls(len(guardrail.tool_calls or ()), max_calls)
    return guardrail


def _json(content: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(dumps(content), status_code=status, media_type="application/json", headers=headers)


async def _dumped(models: list[Any], write: Callable[[Any], Any] = lambda dumped: dumped) -> list[Any]:
    """`write(model.model_dump(mode="json"))` for each model (results, decisions), in slices: a
    1,024-call answer takes tens of milliseconds to dump, and the other clients are answered
    between its slices, not after it."""
    return await mapped(models, lambda model: write(model.model_dump(mode="json")))


def _piece(value: Any) -> bytes:
    """`value` as a piece of a JSON answer (`_in_pieces`)."""
    return dumps(value).encode()


async def _checked(call: Any, tools: Any) -> ReflectionResult | list[ReflectionResult]:
    """`pipeline.check_static` (the static stage only); a turn of several calls is checked call
    by call in slices: the same results, and the other clients are served between slices."""
    if not is_parallel(call):
        return check_call(call, tools, judge_skipped=STATIC_ONLY)
    inventory = normalize_tools(tools)
    return await mapped(
        normalize_calls(call),
        lambda one: check_call([one], inventory, judge_skipped=STATIC_ONLY)[0],  # type: ignore[index]
    )


async def _result_row(rid: str, results: ReflectionResult | list[ReflectionResult], latency_ms: float) -> Response:
    """`rows.result_row` as a response; several results are dumped and written in slices."""
    if isinstance(results, ReflectionResult):
        return _json(result_row(rid, results, latency_ms=latency_ms))
    row = output_row(rid, await _dumped(results), latency_ms=latency_ms)
    return _in_pieces(row, "results", await mapped(row.pop("results"), _piece))


def _in_pieces(
    head: dict[str, Any], key: str, pieces: list[bytes], headers: Mapping[str, str] | None = None
) -> Response:
    """`_json({**head, key: [...]})` (`head` not empty, `key` not in it) with the list's items
    already written (`pieces`), sent in messages of about `_Pieces.MESSAGE_BYTES`: a 1,024-call
    answer is over a megabyte, and one dump, join and write of it held the event loop for
    milliseconds."""
    return _Pieces(f"{dumps(head)[:-1]},{dumps(key)}:[".encode(), pieces, b"]}", headers)


class _Pieces(Response):
    """A JSON answer: `opening`, `items` separated by commas, `closing`; sent in messages of about
    `MESSAGE_BYTES` with the event loop served between them (with a content-length)."""

    MESSAGE_BYTES = 65536
    media_type = "application/json"

    def __init__(self, opening: bytes, items: list[bytes], closing: bytes, headers: Mapping[str, str] | None) -> None:
        self.opening, self.items, self.closing = opening, items, closing
        size = len(opening) + sum(len(item) for item in items) + max(0, len(items) - 1) + len(closing)
        super().__init__(None, headers={**(headers or {}), "content-length": str(size)})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        lead, batch, size = self.opening, [], 0
        for item in self.items:
            batch.append(item)
            size += len(item)
            if size >= self.MESSAGE_BYTES:
                await send({"type": "http.response.body", "body": lead + b",".join(batch), "more_body": True})
                await anyio.lowlevel.checkpoint()
                lead, batch, size = b",", [], 0
        if not batch:
            lead = lead.rstrip(b",")
        await send({"type": "http.response.body", "body": lead + b",".join(batch) + self.closing, "more_body": False})


def _gateway_docs(request: str, answer: str, missing: str) -> dict[str, Any]:
    """The OpenAPI description of a gateway route: what it takes (`request`), what it answers
    (`answer`), and the 404 when its upstream is not configured (`missing`)."""
    return {
        "openapi_extra": {
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"type": "object", "description": request}}},
            }
        },
        "responses": {
            200: {"description": f"{answer} with a `reflection` field and X-Reflection-* headers."},
            404: {"model": Problem, "description": missing},
            502: {"model": Problem, "description": "The upstream could not be reached."},
        },
    }


def create_app(config: ReflectionConfig | None = None) -> Any:
    """The service as an ASGI application for `config` (default: `ReflectionConfig()`, which reads
    `REFLECTION_*`). Routes: `/v1/reflect`, `/v1/check`, `/v1/gate`, the LiteLLM guardrail
    `/beta/litellm_basic_guardrail_api`, the gateway `/v1/chat/completions` and `/v1/responses` (with
    `upstream`), `/v1/messages` (with `upstream.anthropic_base_url`),
    `/healthz`, `/readyz` and `/metrics`."""
    config = config or ReflectionConfig()
    metrics = Metrics(tenants=bool(config.service.tenants))
    state = _State(config, metrics)
    max_calls = config.service.max_calls_per_request

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from reflection.gate import Gate
        from reflection.judge.transport import judge_http_client
        from reflection.service.gateway import Gateway

        async with contextlib.AsyncExitStack() as stack:
            # Tenants whose judges have the same endpoint and client settings share its connections
            # (the judge's max_concurrency then holds for the endpoint as a whole); gateways with the
            # same upstream timeout share one upstream session. Each tenant keeps its own judge reply
            # cache: a hit shows in the answer's usage, which would tell one team what another asked.
            judge_clients: dict[tuple[str, int, float], httpx.AsyncClient] = {}
            sessions: dict[float, Any] = {}
            for tenant in state.tenants.values():
                cfg = tenant.config
                client = None
                if cfg.judge is not None:
                    shared = (cfg.judge.base_url, cfg.judge.max_concurrency, cfg.judge.timeout)
                    client = judge_clients.get(shared)
                    if client is None:
                        client = judge_clients[shared] = await stack.enter_async_context(
                            judge_http_client(cfg.judge.max_concurrency, cfg.judge.timeout)
                        )
                # One judge (the gate's, with its in-memory reply cache) for the gate and /v1/reflect.
                tenant.gate = await stack.enter_async_context(Gate(cfg, http_client=client))
                tenant.reflector = Reflector(cfg, judge=tenant.gate.judge)
                if cfg.upstream is not None:
                    session = sessions.get(cfg.upstream.timeout)
                    tenant.gateway = await stack.enter_async_context(
                        Gateway(
                            cfg.upstream,
                            tenant.gate,
                            tenant.metrics,
                            connections=config.service.max_in_flight,
                            max_body_bytes=config.service.max_body_bytes,
                            max_calls=config.service.max_calls_per_request,
                            session=session,
                        )
                    )
                    sessions.setdefault(cfg.upstream.timeout, tenant.gateway.session)
            state.probe_client = await stack.enter_async_context(httpx.AsyncClient(timeout=2.0))
            yield

    app = FastAPI(
        title="reflection",
        summary="Checks LLM agents' tool calls before they execute.",
        version=_version(),
        lifespan=lifespan,
        responses=_ERRORS,
    )

    @app.exception_handler(HTTPException)
    async def _problem(request: Request, exc: HTTPException) -> Response:
        return _json({"detail": exc.detail}, exc.status_code, exc.headers)

    @app.get("/healthz", tags=["operations"])
    async def healthz() -> dict[str, str]:
        """Alive: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"], responses={503: {"description": "Not ready; `checks` says why."}})
    async def readyz() -> Response:
        """Ready: config loaded, and the judge and upstream (when configured) reachable."""
        now = time.monotonic()
        if now - state.ready_at > _READY_CACHE_SECONDS:
            state.ready = await _readiness(state)
            state.ready_at = now
        ok, checks = state.ready
        return _json({"status": "ready" if ok else "not ready", "checks": checks}, 200 if ok else 503)

    @app.get(
        "/metrics",
        tags=["operations"],
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus exposition format."}},
    )
    async def metrics_route() -> Response:
        """Prometheus metrics: requests by route and status, decisions by action, judge requests,
        tokens and cost, latency histograms."""
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/reflect", tags=["reflection"], openapi_extra=_ROW_BODY, response_model=ResultRow)
    async def reflect_route(request: Request) -> Response:
        """Reflect a row (static checks, grounding, the judge when configured) into the row
        `reflection check` writes for it."""
        row = _read_row(await read_json(request, max_calls), max_calls)
        tenant = state.tenant(request)
        assert tenant.reflector is not None
        started = time.perf_counter()
        try:
            results = await tenant.reflector.reflect(row.call, row.tools, row.history)
        except (TypeError, ValueError) as exc:
            raise HTTPException(422, f"row {row.id}: cannot be reflected: {type(exc).__name__}: {exc}") from None
        await mapped(results if isinstance(results, list) else [results], tenant.metrics.observe_result)
        return await _result_row(row.id, results, (time.perf_counter() - started) * 1000)

    @app.post("/v1/check", tags=["reflection"], openapi_extra=_ROW_BODY, response_model=ResultRow)
    async def check_route(request: Request) -> Response:
        """The static stage only (no grounding, no judge), as a row shaped like `/v1/reflect`'s."""
        row = _read_row(await read_json(request, max_calls), max_calls)
        started = time.perf_counter()
        try:
            results = await _checked(row.call, row.tools)
        except (TypeError, ValueError) as exc:
            raise HTTPException(422, f"row {row.id}: cannot be checked: {type(exc).__name__}: {exc}") from None
        await mapped(results if isinstance(results, list) else [results], state.tenant(request).metrics.observe_result)
        return await _result_row(row.id, results, (time.perf_counter() - started) * 1000)

    @app.post("/v1/gate", tags=["reflection"], openapi_extra=_ROW_BODY, response_model=DecisionOut)
    async def gate_route(request: Request) -> Response:
        """The gate's decision for the row's call (action, call, feedback, reason, result); for
        several calls, `{"id", "decisions": [...]}` in call order."""
        row = _read_row(await read_json(request, max_calls), max_calls)
        tenant = state.tenant(request)
        assert tenant.gate is not None
        try:
            decided = await tenant.gate.check(row.call, row.tools, row.history, started=arrival(request.scope))
        except (TypeError, ValueError) as exc:
            raise HTTPException(422, f"row {row.id}: cannot be gated: {type(exc).__name__}: {exc}") from None
        decisions = decided if isinstance(decided, list) else [decided]
        await mapped(decisions, tenant.metrics.observe_decision)
        actions = ",".join(d.action for d in decisions)
        if isinstance(decided, list):
            headers = {"x-reflection-actions": actions}
            return _in_pieces({"id": row.id}, "decisions", await _dumped(decisions, _piece), headers)
        return _json({"id": row.id, **decided.model_dump(mode="json")}, headers={"x-reflection-actions": actions})

    @app.post(
        _guardrail.PATH,
        tags=["integrations"],
        response_model=_guardrail.GuardrailResponse,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _guardrail.GuardrailRequest.model_json_schema()}},
            }
        },
    )
    async def litellm_guardrail(request: Request) -> Response:
        """LiteLLM's Generic Guardrail API: every tool call in `tool_calls` is gated against `tools`
        with `structured_messages` as the conversation. Allowed: `NONE`; otherwise `BLOCKED`
        with the feedback as `blocked_reason`."""
        body = await _read_guardrail(request, max_calls)
        tenant = state.tenant(request)
        assert tenant.gate is not None
        answer = await _guardrail.apply(tenant.gate, body, tenant.metrics, started=arrival(request.scope))
        return _json(answer, headers={"x-reflection-actions": ",".join(answer["reflection"]["actions"])})

    @app.post(
        "/v1/chat/completions",
        tags=["gateway"],
        **_gateway_docs(
            "An OpenAI Chat Completions request.",
            "The upstream's completion (or event stream)",
            "No upstream configured.",
        ),
    )
    async def chat_completions(request: Request) -> Response:
        """OpenAI-compatible gateway: forwards to `upstream.base_url` and gates every tool call in
        the reply (allow, modify, reflect with bounded re-asks, deny, escalate). Requests without
        tools pass through untouched; upstream errors come back unchanged."""
        gateway = state.tenant(request).gateway
        if gateway is None:
            raise HTTPException(404, "no upstream configured: set upstream.base_url in the config to use the gateway")
        raw = await request.body()
        return await gateway.handle(raw, request.headers, request.scope.get("state", {}))

    @app.post(
        "/v1/responses",
        tags=["gateway"],
        **_gateway_docs(
            "An OpenAI Responses API request.", "The upstream's response (or event stream)", "No upstream configured."
        ),
    )
    async def responses(request: Request) -> Response:
        """OpenAI Responses API gateway: forwards to `{upstream.base_url}/responses` and gates every
        `function_call` output item as `/v1/chat/completions` gates tool calls."""
        gateway = state.tenant(request).gateway
        if gateway is None:
            raise HTTPException(404, "no upstream configured: set upstream.base_url in the config to use the gateway")
        return await gateway.handle_responses(await request.body(), request.headers, request.scope.get("state", {}))

    @app.post(
        "/v1/messages",
        tags=["gateway"],
        **_gateway_docs(
            "An Anthropic Messages request.",
            "The upstream's message (or event stream)",
            "No Anthropic upstream configured.",
        ),
    )
    async def messages(request: Request) -> Response:
        """Anthropic Messages gateway: forwards to `{upstream.anthropic_base_url}/messages` and gates
        every `tool_use` block. With service keys, send the service key in `x-reflection-api-key`
        and the Anthropic key in `x-api-key` (or configure `upstream.anthropic_api_key_env`)."""
        gateway = state.tenant(request).gateway
        if gateway is None or gateway.anthropic_url is None:
            raise HTTPException(404, "no Anthropic upstream configured: set upstream.anthropic_base_url in the config")
        return await gateway.handle_messages(await request.body(), request.headers, request.scope.get("state", {}))

    routes = [route.path for route in app.routes]  # type: ignore[attr-defined]
    service = config.service
    hot = {
        "/v1/check": check_route,
        "/v1/chat/completions": chat_completions,
        "/v1/gate": gate_route,
        "/v1/reflect": reflect_route,
        _guardrail.PATH: litellm_guardrail,
        "/v1/responses": responses,
        "/v1/messages": messages,
    }
    keys = service.key_tenants()
    return ServiceMiddleware(
        _HotRoutes(app, hot),
        api_keys=[key for key, _ in keys],
        key_tenants=[name for _, name in keys],
        max_body_bytes=service.max_body_bytes,
        max_in_flight=service.max_in_flight,
        max_in_flight_per_key=service.max_in_flight_per_key,
        deadline_seconds=service.deadline_seconds,
        body_timeout_seconds=service.body_timeout_seconds,
        metrics=metrics,
        routes=routes,
    )


class _HotRoutes:
    """Calls the endpoints that take a bare `Request` straight for `POST` on their path, and hands
    everything else (other methods, the guardrail's validated body, probes, docs, lifespan) to FastAPI.

    FastAPI's own stack (its middlewares, the router's linear match, dependency solving) costs about
    as much CPU as `/v1/check`'s work itself; these endpoints need none of it. An `HTTPException`
    becomes the same JSON answer as FastAPI's handler gives; anything else propagates to
    `ServiceMiddleware`, which answers 500 with the request id.
    """

    def __init__(self, app: FastAPI, endpoints: Mapping[str, Any]):
        self.app = app
        self.endpoints = dict(endpoints)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        endpoint = self.endpoints.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        scope["app"] = self.app
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except HTTPException as exc:
            response = _json({"detail": exc.detail}, exc.status_code, exc.headers)
        await response(scope, receive, send)


async def _readiness(state: _State) -> tuple[bool, dict[str, str]]:
    """Config loaded (this process is up) and every configured endpoint answering HTTP at all:
    `judge` and `upstream` for the top-level settings, `judge[<tenant>]` and `upstream[<tenant>]`
    for a tenant's own."""
    checks = {"config": "loaded"}
    targets = {}
    if state.config.judge is not None:
        targets["judge"] = state.config.judge.base_url
    else:
        checks["judge"] = "not configured (static checks only)"
    if state.config.upstream is not None:
        targets["upstream"] = state.config.upstream.base_url
    else:
        checks["upstream"] = "not configured (no gateway)"
    for name, tenant in state.tenants.items():
        if name == DEFAULT_TENANT:
            continue
        for kind, endpoint in (("judge", tenant.config.judge), ("upstream", tenant.config.upstream)):
            if endpoint is not None and endpoint is not getattr(state.config, kind):
                targets[f"{kind}[{name}]"] = endpoint.base_url
    assert state.probe_client is not None
    ok = True

    async def probe(name: str, base_url: str) -> None:
        nonlocal ok
        try:
            # Any HTTP answer (even 401 or 404) shows the endpoint is reachable.
            response = await state.probe_client.get(base_url.rstrip("/") + "/models")  # type: ignore[union-attr]
            checks[name] = f"reachable (HTTP {response.status_code})"
        except httpx.HTTPError as exc:
            ok = False
            checks[name] = f"unreachable: {type(exc).__name__}"

    async with anyio.create_task_group() as tg:
        for name, url in targets.items():
            tg.start_soon(probe, name, url)
    return ok, checks


def _version() -> str:
    from reflection import __version__

    return __version__
