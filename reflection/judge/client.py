"""The judge client: the only module that talks to a model server.

Any OpenAI-compatible Chat Completions endpoint (OpenAI, Azure, vLLM, Ollama, llama.cpp,
LiteLLM). The library owns the `httpx.AsyncClient` (pool limits; tests inject their own or
mock it with respx) and posts each Chat Completions request on it directly, reading only
the fields it uses; HTTP failures become the judge's own errors (`JudgeTimeout`,
`JudgeConnectionError`, `JudgeStatusError` in `reflection.errors`), and tenacity does the
retries. Structured output is negotiated once per endpoint: `json_schema`
(strict), then `json_object`, then prompt-only JSON.

Every request is bounded: an overall deadline of `timeout` seconds for the whole exchange
(httpx's own timeouts are per read, so a server trickling bytes would never trip them) and
at most `max_response_bytes` of body read into memory. The configured API key (8 characters
or more) is redacted from every response body before anything reads it, so no reply, error,
log line, output row or cache entry can carry it. 401, 403, 404 and a refused connection raise
`JudgeFatalError`: they are problems of the endpoint, not of one row.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import anyio
import httpx
import orjson
import sniffio
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from reflection import telemetry
from reflection._json import dumps
from reflection._text import CONTROL_CHARACTERS, plain_line
from reflection.errors import (
    InvalidReply,
    JudgeConnectionError,
    JudgeError,
    JudgeFatalError,
    JudgeRequestError,
    JudgeStatusError,
    JudgeTimeout,
    UnreadableReply,
)
from reflection.judge.cache import JudgeCache, MemoryJudgeCache
from reflection.judge.config import JudgeConfig
from reflection.judge.prices import TablePrice, configured_cost
from reflection.judge.reply import read_json, reply_text
from reflection.judge.transport import judge_http_client
from reflection.model import JudgeUsage

__all__ = ["Judge", "JudgeAnswer", "build_judge", "request_key", "reraise_fatal"]

logger = logging.getLogger("reflection.judge")

T = TypeVar("T")
StructuredMode = Literal["json_schema", "json_object", "prompt"]


def reraise_fatal(group: BaseExceptionGroup) -> None:
    """Raise the first `JudgeFatalError` in a task group's exception group, unwrapped, so
    callers see the same exception whether one request failed or several ran at once."""
    fatal, _ = group.split(JudgeFatalError)
    while fatal is not None:
        first = fatal.exceptions[0]
        if isinstance(first, JudgeFatalError):
            raise first
        fatal = first if isinstance(first, BaseExceptionGroup) else None


class _Unanswerable(Exception):
    """A reply that asking again the same way cannot fix (truncated twice, too large)."""


@dataclass(frozen=True)
class JudgeAnswer(Generic[T]):
    """A validated reply and what it cost (summed over retries)."""

    value: T
    usage: JudgeUsage
    cached: bool = False


# One negotiated structured-output mode per endpoint (base_url, model), shared by all judges.
_ENDPOINT_MODES: dict[tuple[str, str], StructuredMode] = {}
_FALLBACK: dict[StructuredMode, StructuredMode | None] = {
    "json_schema": "json_object",
    "json_object": "prompt",
    "prompt": None,
}


def _retryable(exc: BaseException) -> bool:
    """A timeout, a broken connection, HTTP 408, 429 or 5xx, or an invalid reply: asked again."""
    if isinstance(exc, JudgeRequestError):
        return exc.retryable
    return isinstance(exc, InvalidReply)


def _retry_after(exc: BaseException | None) -> float | None:
    if not isinstance(exc, JudgeStatusError) or exc.retry_after is None:
        return None
    try:
        return max(0.0, float(exc.retry_after))
    except ValueError:
        return None


def _server_message(body: Any) -> str:
    """What the server said about an error: `error.message` of an OpenAI-style body, else the body."""
    if isinstance(body, dict):
        message = body.get("message")
        text = message if isinstance(message, str) and message else dumps(body)
    elif isinstance(body, str):
        text = body
    else:
        text = "" if body is None else dumps(body)
    return plain_line(text, only=CONTROL_CHARACTERS)


def _refused(exc: BaseException) -> bool:
    """Whether a connection error was a refused connection (nothing listening at the address)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ConnectionRefusedError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _is_loopback(url: httpx.URL) -> bool:
    host = url.host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _shown_url(url: httpx.URL) -> str:
    """The URL without user info (a password in it is a secret) or query."""
    return str(url.copy_with(username=None, password=None, query=None))


# A 400/422 naming one of these is about the structured-output request: downgrade at once.
_ABOUT_FORMAT = (
    "response_format",
    "json_schema",
    "json_object",
    "structured output",
    "guided_json",
    "guided decoding",
    "response format",
)
# One naming these is about the prompt's size: a lower structured-output mode cannot help.
_ABOUT_CONTEXT = (
    "context_length",
    "context length",
    "context window",
    "maximum context",
    "too many tokens",
    "prompt is too long",
    "reduce the length",
)

_TRUNCATED_BUDGET_FACTOR = 4
"""A reply cut off at `max_completion_tokens` is asked once more with this many times the budget."""

_MAX_TOKENS = 10_000_000
"""More tokens than this in one completion is not a real count (no model's context is that large)."""


def _error_text(exc: JudgeStatusError) -> str:
    """What a 400/422 said, lower-cased, to look for what it was about: the error as JSON, then
    as the line `Error code: <status> - <error>` (Python's printing of it), read as before."""
    body = exc.body
    text = dumps(body) if body is not None and not isinstance(body, str) else str(body or "")
    return f"{text} error code: {exc.status} - {body}".lower()


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
            raise TypeError(
                f"http_client must be an httpx.AsyncClient, got {type(http_client).__module__}."
                f"{type(http_client).__qualname__}"
            )
        self.config = config
        self.cache = cache
        self._owns_client = http_client is None
        self._http = http_client or judge_http_client(config.max_concurrency, config.timeout)
        self._url = httpx.URL(config.base_url.rstrip("/") + "/chat/completions")  # parsed once, not per request
        key = config.resolved_api_key()
        # Replies that echo the key lose it before anything reads them (also in its JSON-escaped form).
        self._secrets = (
            tuple({s.encode() for s in (key, dumps(key)[1:-1])})
            if len(key) >= 8 and (config.api_key is not None or os.environ.get(config.api_key_env))
            else ()
        )
        self._warned: set[str] = set()
        # Loaded now, not at the first reply: importing the table takes ~0.2 s once per process,
        # which a gate's first decision under a deadline should not pay.
        self._table_price = None if config.model in config.prices else TablePrice(config.base_url, config.model)
        self._first_request = True
        self._headers = {
            "Authorization": f"Bearer {key}",
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

    def _key_source(self) -> str:
        """Where the API key sent came from, for a 401/403 message (never the key itself)."""
        if self.config.api_key is not None:
            return (
                "API key from judge.api_key"  # the config file, REFLECTION_JUDGE__API_KEY or JudgeConfig(api_key=...)
            )
        if os.environ.get(self.config.api_key_env):
            return f"API key from the environment variable {self.config.api_key_env}"
        return f"no API key: the environment variable {self.config.api_key_env} is not set"

    def cost(self, usage: JudgeUsage) -> float | None:
        """USD for `usage`: at `config.prices[model]` when the config names the model, else at
        the genai-prices table's price for this endpoint and model; None when neither has one."""
        return self._cost(usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens)

    def _cost(self, prompt: int, cached: int, completion: int) -> float | None:
        price = self.config.prices.get(self.config.model)
        if price is not None:
            return configured_cost(price, prompt, cached, completion)
        assert self._table_price is not None  # made in __init__ for a model the config does not price
        return self._table_price.cost(prompt, cached, completion)

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
                        self._reask(conversation, f"the reply is not valid JSON ({exc})")
                        raise InvalidReply(f"the judge reply was not valid JSON: {exc}") from None
                    try:
                        value = validate(data)
                    except Exception as exc:  # noqa: BLE001 - any validation failure is re-asked
                        self._reask(conversation, str(exc))
                        raise InvalidReply(f"the judge reply failed validation: {exc}") from None
        except (JudgeRequestError, InvalidReply, _Unanswerable) as exc:
            raise JudgeError(f"{exc} (after {totals['requests']} request(s))", self._usage(totals)) from exc
        if self.cache is not None and cache_key is not None:
            await self.cache.put(cache_key, data)
        return JudgeAnswer(value, self._usage(totals))

    def _usage(self, totals: dict[str, int]) -> JudgeUsage:
        if not totals["requests"]:
            return JudgeUsage(**totals)  # nothing sent, nothing spent: 0.0
        return JudgeUsage(
            **totals, cost_usd=self._cost(totals["prompt_tokens"], totals["cached_tokens"], totals["completion_tokens"])
        )

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        after = _retry_after(exc)
        if after is None:
            # Exponential backoff with full jitter, so parallel callers do not retry in lockstep.
            after = random.uniform(0, min(0.25 * 2 ** (state.attempt_number - 1), 8.0))
        return min(after, self.config.retry_max_wait)

    @staticmethod
    def _reask(conversation: list[dict[str, str]], error: str) -> None:
        # The reply itself is never sent back: a re-ask says what was wrong in our own words,
        # so no text of the reply reaches the prompt outside the <data> block. One note at a
        # time: a second re-ask replaces the first.
        note = {
            "role": "user",
            "content": f"{_REASK_NOTE}{error[:1500]}\nReply again with only one JSON object that matches the schema.",
        }
        if conversation[-1]["content"].startswith(_REASK_NOTE):
            conversation[-1] = note
        else:
            conversation.append(note)

    def _warn_once(self, topic: str, message: str) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            logger.warning("%s", message)

    def _downgrade(self, mode: StructuredMode, exc: JudgeStatusError) -> None:
        """Remember a lower structured-output mode for this endpoint; log it once, with the server's reason."""
        order = ("json_schema", "json_object", "prompt")
        current = self.structured_mode
        if order.index(mode) <= order.index(current):
            return  # a concurrent request already went as low
        _ENDPOINT_MODES[(self.config.base_url, self.config.model)] = mode
        logger.warning(
            "judge %s (model %s): structured output %s was refused (%s); using %s from now on",
            _shown_url(self._url),
            plain_line(self.config.model, 100, only=CONTROL_CHARACTERS),
            current,
            exc,
            "prompt-only JSON" if mode == "prompt" else mode,
        )

    async def _request(
        self, conversation: list[dict[str, str]], schema: dict[str, Any], schema_name: str, totals: dict[str, int]
    ) -> str:
        mode = self.structured_mode
        budget = self.config.max_completion_tokens
        probing: JudgeStatusError | None = None  # a 400/422 of unclear cause: is a lower mode accepted?
        while True:
            body: dict[str, Any] = {
                "model": self.config.model,
                "messages": conversation,
                "temperature": 0,
                "max_completion_tokens": budget,
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
            except JudgeStatusError as exc:
                if exc.status not in _ABOUT_THE_REQUEST:
                    raise
                fallback = _FALLBACK[mode]
                text = _error_text(exc)
                if (
                    self.config.structured_output != "auto"
                    or fallback is None
                    or any(p in text for p in _ABOUT_CONTEXT)
                ):
                    raise
                if any(p in text for p in _ABOUT_FORMAT):
                    self._downgrade(fallback, exc)  # the server named response_format: remember at once
                elif probing is None:
                    probing = exc  # remembered only if the lower mode then succeeds
                mode = fallback
                continue
            if probing is not None:
                self._downgrade(mode, probing)
                probing = None
            self._add_usage(totals, completion.get("usage"))
            if _finish_reason(completion) == "length":
                if budget == self.config.max_completion_tokens:
                    budget *= _TRUNCATED_BUDGET_FACTOR  # the same request with room to finish
                    continue
                raise _Unanswerable(
                    f'the judge reply was truncated: it hit the completion budget twice (finish_reason "length" '
                    f"at max_completion_tokens {self.config.max_completion_tokens}, then at {budget}); "
                    "raise judge.max_completion_tokens"
                )
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
            with telemetry.judge_span(self.config) as span:
                completion = await self._post(body)
                telemetry.record_completion(span, completion)
            return completion
        finally:
            limiter.release()

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST one Chat Completions request; the decoded completion, or the judge's own error
        (`JudgeTimeout`, `JudgeConnectionError`, `JudgeStatusError`, `JudgeFatalError`).

        The request goes straight through our httpx client (its headers, auth and transport
        apply, so respx and injected transports see it). The whole exchange has one deadline
        (`timeout`) and a bounded body (`max_response_bytes`).
        """
        if self._first_request:
            self._first_request = False
            self._check_key()
        request = self._http.build_request(
            "POST", self._url, content=orjson.dumps(body), headers=self._headers, timeout=self._timeout
        )
        try:
            # One deadline for the whole exchange. asyncio's own timeout where it runs: anyio's
            # cancel scope costs about 15 us more per request (measured), a percent of a reflection.
            if sniffio.current_async_library() == "asyncio":
                async with asyncio.timeout(self.config.timeout):
                    response, content = await self._exchange(request)
            else:
                with anyio.fail_after(self.config.timeout):
                    response, content = await self._exchange(request)
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise JudgeTimeout() from exc
        except httpx.RequestError as exc:
            if _refused(exc):
                raise JudgeFatalError(
                    _shown_url(self._url), f"connection refused ({plain_line(str(exc), only=CONTROL_CHARACTERS)})"
                ) from exc
            raise JudgeConnectionError(f"Connection error: {exc}") from exc
        for secret in self._secrets:
            if secret in content:
                content = content.replace(secret, b"[redacted]")
        try:
            data = orjson.loads(content)
        except orjson.JSONDecodeError:
            data = None
        if response.status_code >= 400:
            error = _status_error(response, data, content)
            if response.status_code in _FATAL_STATUSES:
                key = f" ({self._key_source()})" if response.status_code in (401, 403) else ""
                raise JudgeFatalError(
                    _shown_url(self._url),
                    f"HTTP {response.status_code}: {error.message}{key}",
                    status=response.status_code,
                    server_message=error.message,
                ) from error
            raise error
        if not isinstance(data, dict):
            raise InvalidReply(f"the judge endpoint sent HTTP {response.status_code} without a JSON chat completion")
        return data

    async def _exchange(self, request: httpx.Request) -> tuple[httpx.Response, bytes]:
        response = await self._http.send(request, stream=True)
        try:
            return response, await self._read_body(response)
        finally:
            await response.aclose()

    async def _read_body(self, response: httpx.Response) -> bytes:
        """The response body, refusing one over `max_response_bytes` without reading it all."""
        cap = self.config.max_response_bytes
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise _Unanswerable(f"the judge's response is {int(declared):,} bytes, over max_response_bytes ({cap:,})")
        chunks = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > cap:
                raise _Unanswerable(f"the judge's response exceeded max_response_bytes ({cap:,} bytes)")
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _check_key(self) -> None:
        """Warn (once, before the first request) when a remote endpoint gets no API key."""
        if self.config.api_key is None and not os.environ.get(self.config.api_key_env) and not _is_loopback(self._url):
            self._warn_once(
                "no-key",
                f"judge {_shown_url(self._url)}: no API key is set (judge.api_key is unset and "
                f"${self.config.api_key_env} is empty) for a remote endpoint; "
                "its requests will likely be refused with HTTP 401",
            )

    def _add_usage(self, totals: dict[str, int], usage: Any) -> None:
        """Add a completion's token counts to `totals`. Missing or malformed counts add nothing;
        negative or absurd ones (a broken server) count as 0, with a warning, so costs stay sane."""
        if not isinstance(usage, dict):
            return
        details = usage.get("prompt_tokens_details")
        counts: dict[str, Any] = {
            "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"),
            "cached_tokens": details.get("cached_tokens") if isinstance(details, dict) else None,
        }
        for key, value in counts.items():
            if isinstance(value, float) and value.is_integer():
                value = counts[key] = int(value)  # a huge integer arrives as a float
            if not isinstance(value, int) or isinstance(value, bool):
                counts[key] = 0
            elif not 0 <= value <= _MAX_TOKENS:
                self._warn_once(
                    f"usage-{key}",
                    f"judge {_shown_url(self._url)} reported {plain_line(str(value), 40, only=CONTROL_CHARACTERS)} "
                    f"{key}, outside 0-{_MAX_TOKENS:,}; counting 0 (further such counts too)",
                )
                counts[key] = 0
        if counts["cached_tokens"] > counts["prompt_tokens"]:
            self._warn_once(
                "usage-cached",
                f"judge {_shown_url(self._url)} reported more cached_tokens than "
                "prompt_tokens; counting the cached tokens as the prompt tokens",
            )
            counts["cached_tokens"] = counts["prompt_tokens"]
        for key, value in counts.items():
            totals[key] += value


def _finish_reason(completion: dict[str, Any]) -> Any:
    choices = completion.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    return first.get("finish_reason") if isinstance(first, dict) else None


_REASK_NOTE = "Your previous reply was invalid: "


def _status_error(response: httpx.Response, data: Any, content: bytes) -> JudgeStatusError:
    """The judge's error for an HTTP error status: the body's `error` member (else the body)."""
    text = content.decode("utf-8", "replace")
    body = data.get("error", data) if isinstance(data, dict) else (data if data is not None else text)
    return JudgeStatusError(response.status_code, body, _server_message(body), response.headers.get("retry-after"))


_FATAL_STATUSES = frozenset({401, 403, 404})
"""A bad key, no permission, an unknown model or a wrong path: no request to the endpoint can succeed."""

_ABOUT_THE_REQUEST = frozenset({400, 422})
"""A bad request or an unprocessable one: perhaps the structured-output mode, perhaps the prompt's size."""


def build_judge(
    config: JudgeConfig,
    *,
    http_client: httpx.AsyncClient | None = None,
    cache: JudgeCache | None = None,
    memory_cache: int = 0,
    max_concurrency: int | None = None,
) -> Judge:
    """The one way reflection builds a judge, for the pipeline, the gate, batch runs, Ray and
    scoring alike.

    `http_client`: the connections to use (default: the judge's own, sized to its concurrency);
    `cache`: a reply cache (`SQLiteJudgeCache` for batch runs); `memory_cache`: instead, an
    in-memory cache of that many replies (a gate's `cache_size`; 0 for none);
    `max_concurrency`: overrides `config.max_concurrency` (a batch's concurrency is its judge's:
    the limiter and the connection pool are sized to it).
    """
    if cache is not None and memory_cache:
        raise ValueError("give a judge either a cache or a memory_cache size, not both")
    if memory_cache:
        cache = MemoryJudgeCache(memory_cache)
    if max_concurrency is not None:
        config = config.model_copy(update={"max_concurrency": max_concurrency})
    return Judge(config, http_client=http_client, cache=cache)


def request_key(
    config: JudgeConfig, template_version: str, messages: list[dict[str, str]], schema: dict[str, Any]
) -> str:
    """Cache key: a hash of model, prompt-template version, messages and schema."""
    payload = dumps(
        {
            "model": config.model,
            "base_url": config.base_url,
            "template": template_version,
            "messages": messages,
            "schema": schema,
        }
    )
    return hashlib.sha256(payload.encode()).hexdigest()
