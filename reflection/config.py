"""Configuration: YAML files, `REFLECTION_*` environment variables, or Python keywords."""

from __future__ import annotations

import difflib
import fnmatch
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from reflection.errors import ConfigError
from reflection.judge.config import JudgeConfig
from reflection.model import SEMANTIC_CHECKS

DEFAULT_THRESHOLDS: dict[str, int] = {
    "general_hallucination_check": 4,
    "general_value_format_alignment": 4,
    "function_selection_appropriateness": 3,
    "agentic_constraints_satisfaction": 3,
}

DEFAULT_TENANT = "default"
"""The tenant of the keys in `service.api_keys` (and of every request when no keys are configured)."""

_TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


class TenantConfig(BaseModel):
    """One team served by `reflection serve` (YAML `service.tenants.<name>:`): its API keys, and
    what it changes of the top-level `gate:`, `judge:` and `upstream:` for requests with those keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    api_keys: tuple[SecretStr, ...] = Field(min_length=1)
    """The keys that authenticate as this tenant; each key belongs to exactly one tenant. Never logged."""
    gate: dict[str, Any] = Field(default_factory=dict)
    """Overrides of the top-level `gate:` policy, key by key (`tools` replaces the top-level rules
    as a whole; `on_judge_failure` is merged tier by tier)."""
    judge: JudgeConfig | None = None
    """This tenant's judge, a whole `JudgeConfig` (not merged with the top-level one); `null`: static
    checks only. Not given: the top-level `judge:`."""
    upstream: dict[str, Any] | None = None
    """Overrides of the top-level `upstream:` for this tenant's gateway requests (`base_url` is
    required when there is no top-level upstream); `null`: no gateway for this tenant (404).
    Not given: the top-level `upstream:`."""

    @field_validator("gate", mode="before")
    @classmethod
    def _gate_overrides(cls, value: Any) -> Any:
        if isinstance(value, GatePolicy):  # from Python: the fields it was given are the overrides
            return value.model_dump(exclude_unset=True)
        if isinstance(value, dict):
            # Every GatePolicy field has a default, so the overrides alone must make a valid policy.
            _validate_part(GatePolicy, value)
        return value

    @field_validator("upstream", mode="before")
    @classmethod
    def _upstream_overrides(cls, value: Any) -> Any:
        if isinstance(value, UpstreamConfig):
            return value.model_dump(exclude_unset=True)
        if isinstance(value, dict):
            _validate_part(UpstreamConfig, {"base_url": "http://placeholder/v1", **value})
        return value

    @field_validator("api_keys")
    @classmethod
    def _no_empty_key(cls, value: tuple[SecretStr, ...]) -> tuple[SecretStr, ...]:
        if any(not key.get_secret_value() for key in value):
            raise ValueError("an API key is empty")
        return value

    def resolve(self, name: str, base: ReflectionConfig) -> ReflectionConfig:
        """`base` as this tenant's requests see it: its gate policy, judge and upstream applied."""
        overrides = _reask_from_upstream(self.gate, self.upstream)  # a tenant's own re-ask keys win
        gate = GatePolicy.model_validate(_deep_merge(base.gate.model_dump(), overrides))
        update: dict[str, Any] = {"gate": gate}
        if "judge" in self.model_fields_set:
            update["judge"] = self.judge
        if "upstream" in self.model_fields_set:
            if self.upstream is None:
                update["upstream"] = None
            else:
                inherited = base.upstream.model_dump() if base.upstream is not None else {}
                merged = {**inherited, **self.upstream}
                if "base_url" not in merged:
                    raise ValueError(
                        f"service.tenants.{name}.upstream: base_url is required (there is no top-level "
                        "upstream to take it from)"
                    )
                update["upstream"] = UpstreamConfig.model_validate(merged)
        return base.model_copy(update=update)


def _validate_part(model: type[BaseModel], value: dict[str, Any]) -> None:
    """Validate overrides of `model`, with pydantic's problems as one line (where and what)."""
    try:
        model.model_validate(value)
    except ValidationError as exc:
        raise ValueError(_describe_plain(exc, model)) from None


def _describe_plain(exc: ValidationError, model: type[BaseModel]) -> str:
    parts = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden":
            close = difflib.get_close_matches(loc, list(model.model_fields), n=1) if len(error["loc"]) == 1 else []
            parts.append(f"unknown key {loc!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        else:
            parts.append(f"{loc}: {error['msg']}")
    return "; ".join(parts)


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
    tenants: dict[str, TenantConfig] = Field(default_factory=dict)
    """Named teams, each with its own API keys and its own gate policy, judge and upstream
    overrides. Keys in `api_keys` belong to the tenant `default`, which has the top-level settings.
    Metrics and logs name the tenant, never the key."""

    @field_validator("tenants")
    @classmethod
    def _tenant_names(cls, value: dict[str, TenantConfig]) -> dict[str, TenantConfig]:
        for name in value:
            if name == DEFAULT_TENANT:
                raise ValueError(
                    f"the tenant name {DEFAULT_TENANT!r} is the tenant of service.api_keys; choose another name"
                )
            if not _TENANT_NAME.fullmatch(name):
                # Names become metric labels and log fields: keep them plain.
                raise ValueError(
                    f"tenant name {name[:80]!r}: use 1 to 63 letters, digits, '_', '.' or '-', "
                    "starting with a letter or digit"
                )
        return value

    @model_validator(mode="after")
    def _one_tenant_per_key(self) -> ServiceConfig:
        # Comparing secrets with == is fine here: this runs once at load time, not per request.
        owner: dict[str, str] = {}
        listed = [(DEFAULT_TENANT, key) for key in self.api_keys]
        listed += [(name, key) for name, tenant in self.tenants.items() for key in tenant.api_keys]
        for name, key in listed:
            secret = key.get_secret_value()
            first = owner.get(secret)
            if first is not None:
                where = (
                    f"twice in {_key_list(name)}"
                    if first == name
                    else f"in both {_key_list(first)} and {_key_list(name)}"
                )
                raise ValueError(f"an API key is listed {where}; a key belongs to exactly one tenant")
            owner[secret] = name
        return self

    def key_tenants(self) -> list[tuple[str, str]]:
        """Every configured key with its tenant's name: `api_keys` (tenant `default`), then each tenant's."""
        keys = [(key.get_secret_value(), DEFAULT_TENANT) for key in self.api_keys]
        keys += [(key.get_secret_value(), name) for name, tenant in self.tenants.items() for key in tenant.api_keys]
        return keys


def _key_list(tenant: str) -> str:
    return "service.api_keys" if tenant == DEFAULT_TENANT else f"service.tenants.{tenant}.api_keys"


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
    """Alias of `gate.max_reflect_rounds`, kept for configs that set it here (see `REASK_ALIASES`)."""
    reflect_fallback: Literal["deny", "escalate"] = "deny"
    """Alias of `gate.reflect_fallback`, kept for configs that set it here (see `REASK_ALIASES`)."""
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

DEFAULT_SCORE_THRESHOLDS: dict[str, float] = {
    "response_exact_match": 0.0,
    "response_rouge_l": 0.5,
    "response_meteor": 0.5,
}
"""`reflection score`'s report: a row fails a text metric below these (0-1). ROUGE-L and METEOR
measure word overlap, so a right answer in other words scores well below 1 (0.5, as DeepEval's
metrics default to); exact match is shown but fails no row (0: off), since ROUGE-L
and METEOR already catch a wrong answer. Every other metric fails below 1.0 (exact) unless
`score_thresholds` says otherwise."""


GateAction = Literal["allow", "modify", "reflect", "deny", "escalate"]
RiskTier = Literal["low", "high"]


def _fail_open_on_low_risk() -> dict[RiskTier, Literal["allow", "deny", "escalate"]]:
    return {"low": "allow", "high": "deny"}


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
        default_factory=_fail_open_on_low_risk
    )
    """Per risk tier, the action when the judge fails, times out or is uncertain:
    `allow` fails open, `deny` or `escalate` fail closed."""
    cache_size: int = Field(default=1024, ge=0)
    """Judge replies kept in memory (least recently used evicted); 0 turns the cache off."""
    shadow: bool = False
    """Every decision is `allow`; the action the gate would have taken is `Decision.shadow_action`."""
    max_reflect_rounds: int = Field(default=2, ge=0, le=10)
    """Re-ask rounds per model turn (`reflection.reask`): times a refused call is sent back to the
    model with its feedback before `reflect_fallback`, and the re-asks one client request may make
    in all. Also accepted as `upstream.max_reflect_rounds` (see `REASK_ALIASES`)."""
    reflect_fallback: Literal["deny", "escalate"] = "deny"
    """What a call still refused after `max_reflect_rounds` re-asks gets. Also accepted as
    `upstream.reflect_fallback`."""

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


REASK_ALIASES = ("max_reflect_rounds", "reflect_fallback")
"""Re-ask settings that live in `gate:` and are still accepted under `upstream:`, where they were
first. Which wins: at one level (the top-level config, or one tenant's overrides) a key set under
`gate:` wins over the same key under `upstream:`; a key set only under `upstream:` is used as if
set under `gate:`; a tenant's own setting (either spelling) wins over the top level's."""


def _reask_from_upstream(gate: dict[str, Any], upstream: dict[str, Any] | None) -> dict[str, Any]:
    """`gate` overrides with the re-ask keys that only `upstream` sets added (see `REASK_ALIASES`)."""
    taken = {key: upstream[key] for key in REASK_ALIASES if upstream and key in upstream and key not in gate}
    return {**gate, **taken} if taken else gate


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
    score_thresholds: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_SCORE_THRESHOLDS))
    """`reflection score --html`: metric -> the value (0-1) below which a row fails it and is
    listed; over the defaults (`DEFAULT_SCORE_THRESHOLDS`; 1.0 for metrics not named)."""
    max_line_bytes: int = Field(default=DEFAULT_MAX_LINE_BYTES, ge=1)
    """Dataset lines (JSON Lines, CSV) longer than this become error rows, so memory stays
    bounded whatever the input."""

    @model_validator(mode="after")
    def _reask_aliases(self) -> ReflectionConfig:
        # `upstream.max_reflect_rounds` / `reflect_fallback` set and the `gate:` key not: the gate takes them.
        if self.upstream is not None:
            update = {
                key: getattr(self.upstream, key)
                for key in REASK_ALIASES
                if key in self.upstream.model_fields_set and key not in self.gate.model_fields_set
            }
            if update:
                object.__setattr__(self, "gate", self.gate.model_copy(update=update))
        return self

    @model_validator(mode="after")
    def _tenants_resolve(self) -> ReflectionConfig:
        # At load time, so that a tenant that cannot be served is a config error, not a failed start.
        for name, tenant in self.service.tenants.items():
            tenant.resolve(name, self)
        return self

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

    @field_validator("score_thresholds")
    @classmethod
    def _merge_score_thresholds(cls, value: dict[str, float]) -> dict[str, float]:
        # Metric names are checked by `reflection.scoring`, which owns them (a higher layer).
        bad = {k: v for k, v in value.items() if not 0 <= v <= 1}
        if bad:
            raise ValueError(f"score_thresholds must be between 0 and 1, got {bad}")
        return {**DEFAULT_SCORE_THRESHOLDS, **value}

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
    named = False  # the part is a name in a mapping of models (service.tenants.<name>), not a field
    for part in loc[:-1]:  # walk nested models (judge.<key>)
        if named:
            named = False
            continue
        field = getattr(model, "model_fields", {}).get(part)
        annotation = getattr(field, "annotation", None)
        named = getattr(annotation, "__origin__", None) is dict
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
