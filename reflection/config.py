"""Configuration: YAML files, `REFLECTION_*` environment variables, or Python keywords."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from reflection._judge_config import JudgeConfig
from reflection.model import SEMANTIC_CHECKS

DEFAULT_THRESHOLDS: dict[str, int] = {
    "general_hallucination_check": 4,
    "general_value_format_alignment": 4,
    "function_selection_appropriateness": 3,
    "agentic_constraints_satisfaction": 3,
}


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
    """`modify` a call whose only problems a verified static correction fixes."""
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
    gate: GatePolicy = Field(default_factory=GatePolicy)
    """The policy a `reflection.Gate` built from this config applies."""

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
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: the config file must hold a mapping at the top level")
        env = cls()  # environment only
        merged = _deep_merge(data, env.model_dump(exclude_unset=True))
        return cls(**_deep_merge(merged, overrides))


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out
