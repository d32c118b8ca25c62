"""The wheel built from the repository: package data, entry points, the distribution name, license
and metadata; the install hints and README links a package index page shows."""

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _pure_python_wheels(monkeypatch):
    """The wheels below check data and metadata: built pure (hatch_build.py's opt-out), not compiled."""
    monkeypatch.setenv("REFLECTION_PURE_PYTHON", "1")


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
    code = (
        "import reflection._resources as r; print(r.data_dir('prompts')); "
        "print(r.load_template('system').version); print(r.example_path('calls.jsonl').is_file())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[0].startswith(str(target)) and out[1] == "1" and out[2] == "True"


def _wheel(tmp_path):
    hatchling = pytest.importorskip("hatchling.builders.wheel")
    return zipfile.ZipFile(
        next(iter(hatchling.WheelBuilder(str(ROOT)).build(directory=str(tmp_path), versions=["standard"])))
    )


def test_the_wheel_is_toolcall_reflection_with_its_license_typing_marker_and_metadata(tmp_path):
    import email

    import reflection

    wheel = _wheel(tmp_path)
    names = wheel.namelist()
    metadata = email.message_from_bytes(wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))))
    assert metadata["Name"] == "toolcall-reflection"  # `reflection` on the package index is another project
    assert metadata["Version"] == reflection.__version__  # one source: reflection/_version.py
    assert metadata["License-Expression"] == "Apache-2.0"
    assert "reflection/py.typed" in names
    license_text = wheel.read(next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))).decode()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    classifiers = metadata.get_all("Classifier")
    assert "Typing :: Typed" in classifiers and "Framework :: Pytest" in classifiers
    assert metadata["Author"] or metadata["Author-email"]
    assert "genai-prices" in " ".join(metadata.get_all("Requires-Dist"))


def test_the_development_extra_installs_this_distribution_by_its_own_name():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "toolcall-reflection"
    assert project["optional-dependencies"]["dev"][0].startswith("toolcall-reflection[")
    assert project["scripts"] == {"reflection": "reflection.cli:app"}


# `pip install reflection` installs another project: every hint names this distribution.
_WRONG_HINT = re.compile(r"""pip install\s+["']?reflection\[|[`"'(]reflection\[[a-z-]+\]""")


def test_every_install_hint_names_the_distribution():
    sources = [
        ROOT / "README.md",
        *(ROOT / "reflection").rglob("*.py"),
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "examples").rglob("*.py"),
        *(ROOT / "benchmarks").rglob("*.md"),
    ]
    wrong = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sources
        if path.is_file()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _WRONG_HINT.search(line)
    ]
    assert not wrong, wrong


def test_readme_links_work_on_a_package_index_page():
    # The README is the project's page on the package index, which has no repository files
    # beside it and no heading anchors: every link and image is an absolute https address.
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)[^)]*\)", text) + re.findall(r"""(?:src|href)=["']([^"']+)""", text)
    assert [t for t in targets if not t.startswith("https://")] == []


def test_the_command_prints_its_version():
    import reflection

    done = subprocess.run(
        [sys.executable, "-m", "reflection.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert done.stdout == f"reflection {reflection.__version__} (toolcall-reflection)\n"


# The packages only the extras bring (and what those bring with them), imported only by the
# modules of those extras: the service, MCP, the framework hooks, plots, text metrics, telemetry,
# Parquet and Ray, the pytest plugin and its HTTP mock.
OPTIONAL_IMPORTS = {
    "agents", "aiohttp", "fastapi", "httptools", "langchain", "langchain_core", "langgraph", "matplotlib", "mcp",
    "mcp_types", "nltk", "opentelemetry", "prometheus_client", "pyarrow", "pydantic_ai", "pytest", "ray", "respx",
    "rouge_score", "starlette", "uvicorn",
}  # fmt: skip


def test_every_package_the_core_imports_is_a_core_dependency():
    # A package the code imports must be declared, not reached through another's dependencies
    # (sniffio came only through openai; when openai left the core, `pip install .` broke).
    import ast
    import importlib.metadata
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in project["dependencies"]}
    distributions = importlib.metadata.packages_distributions()
    imported = set()
    for path in (ROOT / "reflection").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module.split(".")[0])
    undeclared = {
        module: sorted(distributions.get(module, [module]))
        for module in sorted(imported - set(sys.stdlib_module_names) - OPTIONAL_IMPORTS - {"reflection"})
        if not {d.lower().replace("_", "-") for d in distributions.get(module, [module])} & core
    }
    assert undeclared == {}
