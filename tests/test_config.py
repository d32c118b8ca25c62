"""Configuration from YAML, environment and keywords."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from reflection import ReflectionConfig

EXAMPLE = Path(__file__).resolve().parent.parent / "config.example.yaml"


def test_example_config_file_loads():
    config = ReflectionConfig.from_file(EXAMPLE)
    assert config.judge.model == "gpt-4o-mini" and config.mode == "combined"
    assert config.judge.prices["gpt-4o-mini"].cached == 0.075


def test_environment_overrides_the_file_and_keywords_override_both(tmp_path, monkeypatch):
    path = tmp_path / "c.yaml"
    path.write_text("judge:\n  model: file-model\n  base_url: http://file/v1\nmode: combined\n")
    monkeypatch.setenv("REFLECTION_JUDGE__MODEL", "env-model")
    config = ReflectionConfig.from_file(path, mode="per_check")
    assert (config.judge.model, config.judge.base_url, config.mode) == ("env-model", "http://file/v1", "per_check")


def test_partial_thresholds_keep_the_other_defaults():
    assert ReflectionConfig(thresholds={"general_hallucination_check": 5}).thresholds == {
        "general_hallucination_check": 5,
        "general_value_format_alignment": 4,
        "function_selection_appropriateness": 3,
        "agentic_constraints_satisfaction": 3,
    }


@pytest.mark.parametrize(
    "bad",
    [
        {"checks": ["made_up_check"]},
        {"thresholds": {"general_hallucination_check": 6}},
        {"mode": "sometimes"},
        {"unknown_key": 1},
    ],
)
def test_invalid_settings_are_rejected_with_a_message(bad):
    with pytest.raises(ValidationError):
        ReflectionConfig(**bad)


def test_non_mapping_config_file_is_rejected(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(ValueError, match="mapping"):
        ReflectionConfig.from_file(path)
