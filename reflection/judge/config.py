"""The judge's configuration models, apart from the client so that `reflection.config` and
static-only use do not import httpx or tenacity. `reflection.judge` exports them; import them
from there (or from `reflection`)."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

__all__ = ["JudgeConfig", "Price"]


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
