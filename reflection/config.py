"""Configuration: YAML files, `REFLECTION_*` environment variables, or Python keywords."""

from __future__ import annotations

import difflib
import fnmatch
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from reflection._judge_config import JudgeConfig
from reflection.model import SEMANTIC_CHECKS

DEFAULT_THRESHOLDS: dict[str, int] = {
    "general_hallucination_check": 4,
    "general_value_format_alignment": 4,
    "function_selection_appropriateness": 3,
    "agentic_constraints_satisfaction": 3,
}


class ServiceConfig(BaseModel):
    """`reflection serve`: authentication and limits (YAML `service:`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    api_keys: tuple[SecretStr, ...] = ()
    """Bearer keys a client must present; also `REFLECTION_SERVICE__API_KEYS` (a JSON list). Never logged."""
    max_body_bytes: int = Field(default=4_000_000, ge=1024)
    """Larger request bodies get 413."""
    max_in_flight: int = Field(default=256, ge=1)
    """Requests handled at once per worker; more get 503 with Retry-After."""
    deadline_seconds: float = Field(default=120.0, gt=0)
    """Time allowed for one request once its body has arrived (judge and upstream included); then 504."""
    max_in_flight_per_key: int | None = Field(default=None, ge=1)
    """Requests one API key may have in flight at once per worker, and bodies it may be sending
    at once; more get 503 with Retry-After, for that key only. Unset: `max_in_flight` shared
    evenly among the configured keys. Without keys there is no per-key limit."""
    max_calls_per_request: int = Field(default=1024, ge=1)
    """Tool calls one request may ask to check (`/v1/gate`, `/v1/reflect`, `/v1/check`, the
    LiteLLM guardrail); more get 413."""
    max_connections: int = Field(default=1024, ge=1)
    """Open client connections per worker. At the cap the longest-idle connection (one with no
    request under way) is closed for a new one; with none idle the new one gets 503. Lowered,
    with a warning, when the open-file limit (`ulimit -n`) cannot hold it."""
    header_timeout_seconds: float = Field(default=10.0, gt=0)
    """Time a connection has to send a request's headers (from connecting, or from the first
    byte of a request on a kept-alive connection); then it is closed."""
    max_header_bytes: int = Field(default=65536, ge=1024)
    """Request line and headers larger than this get 431 and the connection is closed."""
    body_timeout_seconds: float = Field(default=30.0, gt=0)
    """Time a request has to send its whole body once its headers arrived; then 408."""
    keep_alive_seconds: int = Field(default=5, ge=1)
    """An idle kept-alive connection is closed after this many seconds."""


class UpstreamConfig(BaseModel):
    """The model endpoint behind the gateway (`POST /v1/chat/completions`, `/v1/responses`,
    `/v1/messages`), YAML `upstream:`."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    base_url: str
    """OpenAI-compatible base URL, e.g. https://api.openai.com/v1."""
    api_key_env: str | None = None
    """Environment variable holding the upstream key; unset: the client's own Authorization is passed through."""
    timeout: float = Field(default=600.0, gt=0)
    max_reflect_rounds: int = Field(default=2, ge=0, le=10)
    """Times a refused call is sent back to the model with its feedback before `reflect_fallback`."""
    reflect_fallback: Literal["deny", "escalate"] = "deny"
    """What a call still refused after `max_reflect_rounds` re-asks gets."""
    max_response_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    """The largest upstream answer (a whole reply, one streamed event, a whole stream) the gateway
    reads; a larger one fails that request (502, or an error event) and no other."""
    anthropic_base_url: str | None = None
    """Anthropic Messages base URL, e.g. https://api.anthropic.com/v1: the gateway forwards
    `POST /v1/messages` to `{anthropic_base_url}/messages`. Unset: `/v1/messages` answers 404."""
    anthropic_api_key_env: str | None = None
    """Environment variable holding the Anthropic key (sent as `x-api-key`); unset: the client's own
    `x-api-key` is passed through (unless it was the service key, see the README)."""
    response_memory_bytes: int = Field(default=32 * 1024 * 1024, ge=0)
    """Memory for the Responses API turns the gateway relayed (request input and final output, per
    client), so a request with `previous_response_id` is gated with its earlier turns; the oldest
    are forgotten first. 0: none kept (such requests are gated with their own input only)."""


DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
"""The default longest dataset line read (64 MiB)."""


class ConfigError(ValueError):
    """A configuration that cannot be used: unreadable or malformed YAML, an unknown key, a bad value.
    The message is one line a person can act on."""


GateAction = Literal["allow", "modify", "reflect", "deny", "escalate"]
RiskTier = Literal["low", "high"]


class ToolRule(BaseModel):
    """How the gate treats tools whose name matches `match` (a shell-style glob, e.g. `search_*`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    match: str = Field(min_length=1)
    checks: Literal["skip", "static", "judge"] = "judge"
    """`skip`: no checks, always allowed; `static`: static checks only; `judge`: the full pipeline."""
    risk: RiskTier | None = None
    """The tool's risk tier; unset means the policy's `default_risk`."""


class GatePolicy(BaseModel):
    """What a `reflection.Gate` does with each verdict (YAML: the `gate:` section)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    on_invalid: Literal["reflect", "deny", "escalate"] = "reflect"
    """The action for an invalid call that no verified correction fixes."""
    apply_corrections: bool = True
    """`modify` a call whose only problems a verified static correction fixes (type coercions:
    a correction that removes arguments is only ever suggested, see `apply_renames` for names)."""
    apply_renames: bool = False
    """Also `modify` when the correction renames the tool (`Get_Weather` to `get_weather`). Off by
    default: a rename is a guess, so the model is asked again with a "did you mean" suggestion.
    When on, the rules and risk tier of the tool that would run decide."""
    tools: tuple[ToolRule, ...] = ()
    """Per-tool rules; the first whose glob matches the tool name applies."""
    default_risk: RiskTier = "low"
    """The risk tier of tools no rule gives one."""
    judge_when: Literal["always", "ungrounded"] = "always"
    """`ungrounded`: ask the judge only for high-risk tools or when some argument value is not
    grounded in the conversation (a spec default counts; an enum member alone does not)."""
    deadline_ms: float | None = Field(default=None, gt=0)
    """Upper bound on one decision's wait for the judge; past it the judge counts as failed."""
    on_judge_failure: dict[RiskTier, Literal["allow", "deny", "escalate"]] = Field(
        default_factory=lambda: {"low": "allow", "high": "deny"})
    """Per risk tier, the action when the judge fails, times out or is uncertain:
    `allow` fails open, `deny` or `escalate` fail closed."""
    cache_size: int = Field(default=1024, ge=0)
    """Judge replies kept in memory (least recently used evicted); 0 turns the cache off."""
    shadow: bool = False
    """Every decision is `allow`; the action the gate would have taken is `Decision.shadow_action`."""

    @field_validator("on_judge_failure")
    @classmethod
    def _both_tiers(cls, value: dict[str, str]) -> dict[str, str]:
        return {"low": "allow", "high": "deny", **value}

    def rule_for(self, tool: str) -> ToolRule | None:
        """The first rule whose glob matches `tool`, or None."""
        for rule in self.tools:
            if fnmatch.fnmatchcase(tool, rule.match):
                return rule
        return None


class ReflectionConfig(BaseSettings):
    """How to reflect. With `judge` unset, only the static stage and grounding run.

    Environment variables use the prefix `REFLECTION_` and `__` for nesting, e.g.
    `REFLECTION_JUDGE__BASE_URL`, `REFLECTION_JUDGE__MODEL`, `REFLECTION_MODE=per_check`.
    """

    model_config = SettingsConfigDict(env_prefix="REFLECTION_", env_nested_delimiter="__", extra="forbid", frozen=True)

    judge: JudgeConfig | None = None
    mode: Literal["combined", "per_check"] = "combined"
    """`combined`: all checks in one judge request; `per_check`: one request per check, concurrently."""
    checks: tuple[str, ...] = SEMANTIC_CHECKS
    thresholds: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    """A check passes when its 1-5 score reaches its threshold."""
    uncertain_below: float | None = Field(default=None, ge=0, le=1)
    """A check whose judge confidence is below this is marked `uncertain` instead of passed/failed."""
    continue_on_static: bool = False
    """Run the judge even when the static stage failed (the verdict stays invalid)."""
    history_token_budget: int = Field(default=3000, ge=200)
    """Approximate tokens of conversation sent to the judge; the first user turn and the
    most recent turns are kept."""
    prompts_dir: Path | None = None
    """A directory of templates (`<check>.md`, `system.md`) that override the shipped ones."""
    service: ServiceConfig = Field(default_factory=ServiceConfig)
    """`reflection serve`: API keys and limits."""
    upstream: UpstreamConfig | None = None
    """The gateway's model endpoint; without it `/v1/chat/completions` answers 404."""
    gate: GatePolicy = Field(default_factory=GatePolicy)
    """The policy a `reflection.Gate` built from this config applies."""
    wordnet: Path | None = None
    """A WordNet database directory for METEOR's synonyms in `reflection score` (also
    `REFLECTION_WORDNET`); unset: NLTK's data path, then Debian's /usr/share/wordnet."""
    max_line_bytes: int = Field(default=DEFAULT_MAX_LINE_BYTES, ge=1)
    """Dataset lines (JSON Lines, CSV) longer than this become error rows, so memory stays
    bounded whatever the input."""

    @field_validator("checks")
    @classmethod
    def _known_checks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [name for name in value if name not in SEMANTIC_CHECKS]
        if unknown:
            raise ValueError(f"unknown semantic checks {unknown}; choose from {list(SEMANTIC_CHECKS)}")
        return value

    @field_validator("thresholds")
    @classmethod
    def _merge_thresholds(cls, value: dict[str, int]) -> dict[str, int]:
        unknown = [name for name in value if name not in SEMANTIC_CHECKS]
        if unknown:
            raise ValueError(f"thresholds for unknown checks {unknown}")
        bad = {k: v for k, v in value.items() if not 1 <= v <= 5}
        if bad:
            raise ValueError(f"thresholds must be between 1 and 5, got {bad}")
        return {**DEFAULT_THRESHOLDS, **value}

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any) -> ReflectionConfig:
        """Load a YAML file like `config.example.yaml`; environment variables and
        `overrides` take precedence over the file."""
        import yaml  # only config files need it: commands without --config start without it

        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: the config file must hold a mapping at the top level")
        env = cls()  # environment only
        merged = _deep_merge(data, env.model_dump(exclude_unset=True))
        return cls(**_deep_merge(merged, overrides))


def load_config(path: str | Path | None = None, *, static_only: bool = False, **flags: Any) -> ReflectionConfig:
    """The configuration the commands use: a YAML file, then the environment (`REFLECTION_*`),
    then `flags` (`base_url` and `model` go to the judge; None means not given). `static_only`
    drops the judge. Raises `ConfigError` with a one-line message for anything unusable."""
    judge_flags = {k: v for k, v in flags.items() if k in ("base_url", "model") and v is not None}
    overrides: dict[str, Any] = {k: v for k, v in flags.items() if k not in ("base_url", "model") and v is not None}
    if judge_flags:
        overrides["judge"] = judge_flags
    where = f" in {path}" if path else ""
    try:
        cfg = ReflectionConfig.from_file(path, **overrides) if path else ReflectionConfig(**_merge_env(overrides))
    except ValidationError as exc:
        raise ConfigError(f"invalid configuration{where}: {_describe(exc)}") from None
    except _yaml_errors(path) as exc:  # evaluated only when an error gets this far
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path} is not valid YAML{at}: {problem}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # from_file's own checks (e.g. not a mapping)
        raise ConfigError(f"invalid configuration{where}: {exc}") from None
    return cfg.model_copy(update={"judge": None}) if static_only else cfg


def _yaml_errors(path: str | Path | None) -> Any:
    """The YAML parser's errors, when a file was read (only then is yaml imported)."""
    if not path:
        return ()
    import yaml

    return yaml.YAMLError


def _describe(exc: ValidationError) -> str:
    """A pydantic error as one line: each problem's key path and message, with a suggestion for
    a misspelt key."""
    parts = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden":
            parts.append(f"unknown key {loc!r}" + _suggest(error["loc"]))
        else:
            parts.append(f"{loc or 'config'}: {error['msg']}")
    return "; ".join(parts)


def _suggest(loc: tuple[Any, ...]) -> str:
    model: Any = ReflectionConfig
    for part in loc[:-1]:  # walk nested models (judge.<key>)
        field = getattr(model, "model_fields", {}).get(part)
        annotation = getattr(field, "annotation", None)
        model = next((a for a in getattr(annotation, "__args__", (annotation,)) if hasattr(a, "model_fields")), None)
        if model is None:
            return ""
    close = difflib.get_close_matches(str(loc[-1]), list(getattr(model, "model_fields", {})), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _merge_env(overrides: dict[str, Any]) -> dict[str, Any]:
    """Flags over the environment, keeping env-set judge fields a flag does not name."""
    env = ReflectionConfig().model_dump(exclude_unset=True)
    if "judge" in overrides and isinstance(env.get("judge"), dict):
        overrides = {**overrides, "judge": {**env["judge"], **overrides["judge"]}}
    return {**env, **overrides}


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out
