"""The judge client: the only module that talks to a model server.

Any OpenAI-compatible Chat Completions endpoint (OpenAI, Azure, vLLM, Ollama, llama.cpp,
LiteLLM). The library owns the `httpx.AsyncClient` (pool limits; tests inject their own or
mock it with respx) and posts each Chat Completions request on it directly, reading only
the fields it uses; HTTP failures become the `openai` SDK's exception types, and tenacity
does the retries. Structured output is negotiated once per endpoint: `json_schema`
(strict), then `json_object`, then prompt-only JSON.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

import anyio
import httpx
import orjson
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from reflection._http import judge_http_client
from reflection._json import dumps
from reflection._reply import UnreadableReply, read_json, reply_text
from reflection.model import JudgeUsage

if TYPE_CHECKING:
    import openai

__all__ = ["Judge", "JudgeAnswer", "JudgeCache", "JudgeConfig", "JudgeError", "Price", "InvalidReply"]

T = TypeVar("T")
StructuredMode = Literal["json_schema", "json_object", "prompt"]


class Price(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    prompt: float = 0.0
    completion: float = 0.0
    cached: float | None = None
    """Price of cached prompt tokens; defaults to the prompt price."""


class JudgeConfig(BaseModel):
    """Where the judge lives and how to talk to it. The API key is read from the
    environment variable named by `api_key_env` unless given directly; it is never logged."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    base_url: str = "https://api.openai.com/v1"
    model: str = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    api_key: SecretStr | None = None
    timeout: float = Field(default=60.0, gt=0)
    max_attempts: int = Field(default=4, ge=1, le=20)
    max_concurrency: int = Field(default=16, ge=1)
    retry_max_wait: float = Field(default=30.0, ge=0)
    """Upper bound on one wait between attempts, Retry-After included (seconds)."""
    structured_output: Literal["auto", "json_schema", "json_object", "prompt"] = "auto"
    max_completion_tokens: int = Field(default=2048, ge=64)
    prices: dict[str, Price] = Field(default_factory=dict)
    """Model name -> price; models not listed cost 0."""

    def resolved_api_key(self) -> str:
        """The key to send: explicit, else from the environment, else a placeholder (local servers)."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        return os.environ.get(self.api_key_env) or "not-needed"


class JudgeError(Exception):
    """The judge could not give a valid answer within the allowed attempts."""

    def __init__(self, reason: str, usage: JudgeUsage | None = None):
        super().__init__(reason)
        self.reason = reason
        self.usage = usage or JudgeUsage()


class InvalidReply(Exception):
    """A reply that was not JSON or failed validation; the judge is re-asked with the error."""


@dataclass(frozen=True)
class JudgeAnswer(Generic[T]):
    """A validated reply and what it cost (summed over retries)."""

    value: T
    usage: JudgeUsage
    cached: bool = False


class JudgeCache(Protocol):
    """Stores raw validated replies keyed by request content (see `reflection.batch`)."""

    async def get(self, key: str) -> Any | None: ...

    async def put(self, key: str, value: Any) -> None: ...


@functools.cache
def _sdk() -> ModuleType:
    """The `openai` SDK, for its exception types only. Importing it takes ~0.7 s (most of
    `import reflection`), so it waits until a `Judge` is built: static-only use never pays it,
    and a judge's first error never stalls the event loop on an import."""
    import openai

    return openai


# One negotiated structured-output mode per endpoint (base_url, model), shared by all judges.
_ENDPOINT_MODES: dict[tuple[str, str], StructuredMode] = {}
_FALLBACK: dict[StructuredMode, StructuredMode | None] = {"json_schema": "json_object", "json_object": "prompt", "prompt": None}


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, (_sdk().APITimeoutError, _sdk().APIConnectionError, InvalidReply)):
        return True
    if isinstance(exc, _sdk().APIStatusError):
        return exc.status_code == 429 or exc.status_code == 408 or exc.status_code >= 500
    return False


def _retry_after(exc: BaseException | None) -> float | None:
    if not isinstance(exc, _sdk().APIStatusError):
        return None
    value = exc.response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, _sdk().APIStatusError):
        return f"HTTP {exc.status_code} from the judge endpoint"
    if isinstance(exc, _sdk().APITimeoutError):
        return "the judge request timed out"
    if isinstance(exc, _sdk().APIConnectionError):
        return "could not connect to the judge endpoint"
    return str(exc)


class Judge:
    """A client for one judge endpoint. Reuse one per process: it holds the connection pool
    and the concurrency limiter. Use as an async context manager or call `aclose()`."""

    def __init__(
        self,
        config: JudgeConfig,
        *,
        http_client: httpx.AsyncClient | None = None,
        cache: JudgeCache | None = None,
    ):
        if http_client is not None and not isinstance(http_client, httpx.AsyncClient):
            raise TypeError(f"http_client must be an httpx.AsyncClient, got {type(http_client).__module__}."
                            f"{type(http_client).__qualname__}")
        _sdk()  # now, not at the first error
        self.config = config
        self.cache = cache
        self._owns_client = http_client is None
        self._http = http_client or judge_http_client(config.max_concurrency, config.timeout)
        self._url = httpx.URL(config.base_url.rstrip("/") + "/chat/completions")  # parsed once, not per request
        self._headers = {
            "Authorization": f"Bearer {config.resolved_api_key()}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "reflection",
        }
        # As the SDK does: organisation and project from the environment, when set.
        for header, variable in (("OpenAI-Organization", "OPENAI_ORG_ID"), ("OpenAI-Project", "OPENAI_PROJECT_ID")):
            if os.environ.get(variable):
                self._headers[header] = os.environ[variable]
        self._timeout = httpx.Timeout(config.timeout)
        self._limiter: anyio.CapacityLimiter | None = None

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        """The endpoint's concurrency limiter (created in the running event loop)."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.config.max_concurrency)
        return self._limiter

    @property
    def structured_mode(self) -> StructuredMode:
        """The structured-output mode in use for this endpoint."""
        if self.config.structured_output != "auto":
            return self.config.structured_output
        return _ENDPOINT_MODES.get((self.config.base_url, self.config.model), "json_schema")

    async def __aenter__(self) -> Judge:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this judge created it."""
        if self._owns_client:
            await self._http.aclose()

    def cost(self, usage: JudgeUsage) -> float:
        """USD for `usage` under the configured price of this judge's model."""
        price = self.config.prices.get(self.config.model)
        if price is None:
            return 0.0
        cached_price = price.prompt if price.cached is None else price.cached
        uncached = usage.prompt_tokens - usage.cached_tokens
        return (uncached * price.prompt + usage.cached_tokens * cached_price + usage.completion_tokens * price.completion) / 1e6

    async def ask(
        self,
        messages: list[dict[str, str]],
        *,
        schema: dict[str, Any],
        schema_name: str,
        validate: Callable[[Any], T],
        cache_key: str | None = None,
    ) -> JudgeAnswer[T]:
        """Ask for one JSON reply matching `schema`; `validate` turns the parsed JSON into T
        or raises (ValueError / pydantic.ValidationError), which re-asks quoting the error.

        Raises JudgeError after `max_attempts`, or at once on a non-retryable error.
        """
        if self.cache is not None and cache_key is not None:
            hit = await self.cache.get(cache_key)
            if hit is not None:
                try:
                    return JudgeAnswer(validate(hit), JudgeUsage(), cached=True)
                except Exception:  # noqa: BLE001 - a stale or foreign cache entry is just a miss
                    pass
        conversation = list(messages)
        totals = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0, "prompt_chars": 0}

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.config.max_attempts),
            retry=retry_if_exception(_retryable),
            wait=self._wait,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    raw_reply = await self._request(conversation, schema, schema_name, totals)
                    try:
                        data = read_json(raw_reply)
                    except ValueError as exc:
                        self._reask(conversation, raw_reply, f"the reply is not valid JSON ({exc})")
                        raise InvalidReply(f"the judge reply was not valid JSON: {exc}") from None
                    try:
                        value = validate(data)
                    except Exception as exc:  # noqa: BLE001 - any validation failure is re-asked
                        self._reask(conversation, raw_reply, str(exc))
                        raise InvalidReply(f"the judge reply failed validation: {exc}") from None
        except (_sdk().APIError, InvalidReply) as exc:
            raise JudgeError(f"{_describe(exc)} (after {totals['requests']} request(s))", self._usage(totals)) from exc
        if self.cache is not None and cache_key is not None:
            await self.cache.put(cache_key, data)
        return JudgeAnswer(value, self._usage(totals))

    def _usage(self, totals: dict[str, int]) -> JudgeUsage:
        usage = JudgeUsage(**totals)
        if self.config.model not in self.config.prices:
            return usage  # costs nothing: no second model to build
        return usage.model_copy(update={"cost_usd": self.cost(usage)})

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        after = _retry_after(exc)
        if after is None:
            # Exponential backoff with full jitter, so parallel callers do not retry in lockstep.
            after = random.uniform(0, min(0.25 * 2 ** (state.attempt_number - 1), 8.0))
        return min(after, self.config.retry_max_wait)

    @staticmethod
    def _reask(conversation: list[dict[str, str]], reply: str, error: str) -> None:
        conversation.append({"role": "assistant", "content": reply[:4000]})
        conversation.append({
            "role": "user",
            "content": f"Your previous reply was invalid: {error[:1500]}\nReply again with only one JSON object that matches the schema.",
        })

    async def _request(
        self, conversation: list[dict[str, str]], schema: dict[str, Any], schema_name: str, totals: dict[str, int]
    ) -> str:
        mode = self.structured_mode
        while True:
            body: dict[str, Any] = {
                "model": self.config.model,
                "messages": conversation,
                "temperature": 0,
                "max_completion_tokens": self.config.max_completion_tokens,
            }
            if mode == "json_schema":
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": schema_name, "strict": True, "schema": schema},
                }
            elif mode == "json_object":
                body["response_format"] = {"type": "json_object"}
            totals["requests"] += 1
            totals["prompt_chars"] += sum(len(m["content"]) for m in conversation)
            try:
                completion = await self._post_limited(body)
            except (_sdk().BadRequestError, _sdk().UnprocessableEntityError):
                fallback = _FALLBACK[mode]
                if self.config.structured_output != "auto" or fallback is None:
                    raise
                # The server rejected this response_format: remember the downgrade for the endpoint.
                mode = _ENDPOINT_MODES[(self.config.base_url, self.config.model)] = fallback
                continue
            _add_usage(totals, completion.get("usage"))
            choices = completion.get("choices")
            if not choices or not isinstance(choices, list):
                raise InvalidReply("the judge returned no choices")
            message = choices[0].get("message") if isinstance(choices[0], dict) else None
            try:
                return reply_text(message)
            except UnreadableReply as exc:  # a refusal or an empty reply, said as such
                raise InvalidReply(str(exc)) from None

    async def _post_limited(self, body: dict[str, Any]) -> dict[str, Any]:
        """`_post` holding one of the limiter's tokens. A free token is taken without the
        scheduling checkpoint `async with limiter` costs (about 10 µs a request); the request
        itself yields to the event loop soon enough."""
        limiter = self.limiter
        try:
            limiter.acquire_nowait()
        except anyio.WouldBlock:
            await limiter.acquire()
        try:
            return await self._post(body)
        finally:
            limiter.release()

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST one Chat Completions request; the decoded completion, or the SDK's exception.

        The request goes straight through our httpx client (its headers, auth and transport
        apply, so respx and injected transports see it) instead of through the SDK's request
        machinery, which costs about a millisecond of CPU per request; errors are mapped onto
        the SDK's exception types, so retries and callers see what the SDK would raise.
        """
        request = self._http.build_request("POST", self._url, content=orjson.dumps(body), headers=self._headers,
                                           timeout=self._timeout)
        try:
            response = await self._http.send(request)
        except httpx.TimeoutException as exc:
            raise _sdk().APITimeoutError(request=request) from exc  # type: ignore[arg-type]
        except httpx.RequestError as exc:
            raise _sdk().APIConnectionError(message=f"Connection error: {exc}", request=request) from exc  # type: ignore[arg-type]
        try:
            data = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            data = None
        if response.status_code >= 400:
            raise _status_error(response, data)
        if not isinstance(data, dict):
            raise InvalidReply(f"the judge endpoint sent HTTP {response.status_code} without a JSON chat completion")
        return data


def _status_error(response: httpx.Response, data: Any) -> openai.APIStatusError:
    """The SDK's exception for an HTTP error status (its own status-to-class mapping)."""
    body = data.get("error", data) if isinstance(data, dict) else (data if data is not None else response.text)
    sdk = _sdk()
    name = _STATUS_ERRORS.get(response.status_code)
    cls = getattr(sdk, name) if name else sdk.InternalServerError if response.status_code >= 500 else sdk.APIStatusError
    return cls(f"Error code: {response.status_code} - {body}", response=response, body=body)  # type: ignore[arg-type]


_STATUS_ERRORS: dict[int, str] = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    409: "ConflictError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
}


def _add_usage(totals: dict[str, int], usage: Any) -> None:
    """Add a completion's token counts to `totals`; missing or malformed counts add nothing."""
    if not isinstance(usage, dict):
        return
    for key, field in (("prompt_tokens", "prompt_tokens"), ("completion_tokens", "completion_tokens")):
        value = usage.get(field)
        if isinstance(value, int) and not isinstance(value, bool):
            totals[key] += value
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if isinstance(cached, int) and not isinstance(cached, bool):
        totals["cached_tokens"] += cached


def request_key(config: JudgeConfig, template_version: str, messages: list[dict[str, str]], schema: dict[str, Any]) -> str:
    """Cache key: a hash of model, prompt-template version, messages and schema."""
    payload = dumps({"model": config.model, "base_url": config.base_url, "template": template_version,
                     "messages": messages, "schema": schema})
    return hashlib.sha256(payload.encode()).hexdigest()

