"""A wheel built from the repository carries the prompts and examples as package data."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_wheel_contains_prompts_examples_and_the_entry_points(tmp_path):
    hatchling = pytest.importorskip("hatchling.builders.wheel")
    builder = hatchling.WheelBuilder(str(ROOT))
    wheel = Path(next(iter(builder.build(directory=str(tmp_path), versions=["standard"]))))
    names = zipfile.ZipFile(wheel).namelist()
    for prompt in (ROOT / "prompts").rglob("*.md"):
        assert f"reflection/_data/prompts/{prompt.relative_to(ROOT / 'prompts').as_posix()}" in names
    assert "reflection/_data/examples/calls.jsonl" in names
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "reflection = reflection.cli:app" in entry_points
    assert "reflection = reflection.testing.plugin" in entry_points


def test_installed_wheel_finds_its_shipped_data(tmp_path):
    hatchling = pytest.importorskip("hatchling.builders.wheel")
    wheel = Path(next(iter(hatchling.WheelBuilder(str(ROOT)).build(directory=str(tmp_path), versions=["standard"]))))
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    code = ("import reflection._resources as r; print(r.data_dir('prompts')); "
            "print(r.load_template('system').version); print(r.example_path('calls.jsonl').is_file())")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(target)},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[0].startswith(str(target)) and out[1] == "1" and out[2] == "True"
