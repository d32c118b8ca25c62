"""`import reflection` and the static-only CLI load only what they use (PEP 562 attributes)."""

import json
import subprocess
import sys

import reflection
import reflection.batch
import reflection.scoring

HEAVY = (
    "httpx",
    "aiosqlite",
    "openai",
    "tenacity",
    "rich",
    "yaml",
    "reflection.judge.client",
    "reflection.judge.cache",
    "reflection.judge.transport",
    "reflection.semantic",
    "reflection.gate",
    "reflection.scoring.",
    "reflection.calibrate",
)


def loaded_after(code: str) -> list[str]:
    """The heavy modules in sys.modules after running `code` in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    # reflection.scoring._cli only registers the `score` command; it imports its work when run.
    return [
        name
        for name in json.loads(out.splitlines()[-1])
        if (name.startswith(HEAVY) or name in HEAVY) and name != "reflection.scoring._cli"
    ]


def test_import_reflection_loads_no_judge_cache_scoring_or_service():
    assert loaded_after("import reflection") == []


def test_static_only_check_of_an_empty_file_loads_no_judge_cache_or_scoring(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    code = (
        "from reflection.cli import app\n"
        f"try:\n    app(['check', '--static-only', {str(empty)!r}, '-o', {str(tmp_path / 'out.jsonl')!r}])\n"
        "except SystemExit as exit:\n    assert exit.code in (0, None), exit.code"
    )
    assert loaded_after(code) == []


def test_the_judge_loads_when_first_used():
    assert "httpx" in loaded_after("import reflection\nreflection.Judge")


def test_every_public_name_resolves_and_is_listed_by_dir():
    for package in (reflection, reflection.batch, reflection.scoring):
        for name in package.__all__:
            assert getattr(package, name) is not None, (package.__name__, name)
        assert set(package.__all__) <= set(dir(package))


def test_public_names_are_the_objects_of_their_modules():
    from reflection import gate, judge, pipeline

    assert reflection.JudgeConfig is judge.JudgeConfig
    assert reflection.GatePolicy is gate.GatePolicy
    assert reflection.Reflector is pipeline.Reflector


def test_an_unknown_name_is_an_attribute_error():
    try:
        reflection.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("expected AttributeError")
