"""The judge's configuration models and errors, apart from the client so that
`reflection.config`, the CLI's error handling and static-only use do not import httpx,
tenacity or openai. `reflection.judge` re-exports them; import them from there (or from
`reflection`)."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from reflection.model import JudgeUsage

__all__ = ["JudgeConfig", "JudgeError", "JudgeFatalError", "Price"]


class Price(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    prompt: float = Field(default=0.0, ge=0)
    completion: float = Field(default=0.0, ge=0)
    cached: float | None = Field(default=None, ge=0)
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
    """Overall deadline of one request (seconds), from sending it to the last byte of the reply."""
    max_attempts: int = Field(default=4, ge=1, le=20)
    max_concurrency: int = Field(default=16, ge=1)
    retry_max_wait: float = Field(default=30.0, ge=0)
    """Upper bound on one wait between attempts, Retry-After included (seconds)."""
    structured_output: Literal["auto", "json_schema", "json_object", "prompt"] = "auto"
    max_completion_tokens: int = Field(default=2048, ge=64)
    """Completion budget of a request. A reply cut off at it (`finish_reason: "length"`) is
    asked once more with 4 x this budget, then reported as truncated."""
    max_response_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    """Largest response body read into memory; a bigger one is an error (not retried)."""
    prices: dict[str, Price] = Field(default_factory=dict)
    """Model name -> price, overriding the genai-prices table (which knows the hosted providers
    by base URL). A model priced by neither has an unknown cost (`cost_usd` null), never 0."""

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


class JudgeFatalError(Exception):
    """The judge endpoint cannot answer any request: HTTP 401 (bad key), 403 (no permission),
    404 (unknown model or wrong path), or a refused connection. Not a problem of one row, so
    it is never turned into an error row: `reflection check`, `batch` and `score` stop on it.
    `str()` is one line: `judge <url>: HTTP <status>: <server message>`."""

    def __init__(self, url: str, problem: str, *, status: int | None = None, server_message: str = ""):
        super().__init__(f"judge {url}: {problem}")
        self.url = url
        self.status = status
        self.server_message = server_message
