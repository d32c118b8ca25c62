"""Every code block of README.md and of the documentation pages (docs/*.md) runs as written.

Blocks are found by their fence language, so new ones (and new pages) are picked up without
touching this file:

- `python`: executed in a temporary directory holding the repository's examples (`calls.jsonl`,
  `predictions.jsonl`, `references.jsonl` and `examples/`). Top-level `await`, `async for`
  and `async with` run as they would in an asyncio REPL or notebook (the block, or the text
  just before it, says how to run it in a script: `asyncio.run(main())`). A block runs after
  the earlier python blocks of its section, in one namespace, as a reader would run them: in
  the README a section is a `##` heading, in the docs a whole page.
  A block that defines `test_*` functions is a pytest file: it runs under pytest with
  pytest-asyncio in `asyncio_mode = "auto"` and reflection's plugin, as the README tells the
  reader. A block that imports Ray gets a small local Ray (2 CPUs, no dashboard).
- `bash`: run with `bash -e` in a fresh copy of that directory (`config.yaml` is
  `config.example.yaml`). `pip install ... &&` prefixes are not run: the package under test is
  already installed.
- `console`: each `$ command` is run as for bash; the output lines shown without digits
  (titles, table rules and headers) must appear in the real output.
- `json`: parsed; a row whose `id` is one of the shipped example rows must match the real
  `reflection check --static-only` row for it, where `"..."` stands for anything.
- `yaml`: parsed; a mapping of configuration keys must load as a `ReflectionConfig`.
- `text` or no language: output shown to the reader (what a block prints), not run.

A judge endpoint in a block (`http(s)://host[:port]/v1`) is served by the loopback stand-in
judge (`reflection.testing.server.StandInJudge`), so nothing leaves the machine.

A block that cannot run offline is preceded by `<!-- readme-test: skip <reason> -->`; keep
these rare (at most 4 per file). `<!-- readme-test: same-dir -->` runs a shell block in the
previous shell block's directory, on the same page (e.g. to show a resumed run).
A line `--8<-- "path"` in a block is the file at that path from the repository root, as the
docs site's snippets extension includes it.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from reflection.config import ReflectionConfig
from reflection.testing.server import StandInJudge

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").rglob("*.md"))]
"""The README first, then every documentation page."""
LANGUAGES = ("python", "bash", "console", "json", "yaml")
OUTPUT = ("text", "")
"""Fence languages of output samples, which are shown, not run."""
_FENCE = re.compile(r"^```(\S*)\s*$")
_MARKER = re.compile(r"<!--\s*readme-test:\s*(skip|same-dir)\b\s*(.*?)\s*-->")
_JUDGE_URL = re.compile(r"https?://[A-Za-z0-9.\-]+(?::\d+)?/v1\b")
_PIP = re.compile(r"^\s*pip install [^&\n]*&&\s*", re.MULTILINE)
_SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.MULTILINE)


@dataclass(frozen=True)
class Block:
    """One fenced code block of the README or of a documentation page."""

    line: int
    lang: str
    code: str
    section: str
    """The `##` heading it sits under in the README; "" on a documentation page (one section)."""
    marker: str | None = None
    reason: str = ""
    path: str = "README.md"
    """The file, relative to the repository root."""
    lead: str = ""
    """The text between the previous heading or block and this one."""

    @property
    def name(self) -> str:
        return f"{self.path}:{self.line}:{self.lang}"


def readme_blocks(text: str | None = None, path: str = "README.md") -> list[Block]:
    """The fenced blocks of a Markdown file (the README by default), with their section and
    readme-test marker."""
    source = ROOT / path
    lines = (source.read_text(encoding="utf-8") if text is None else text).splitlines()
    by_heading = path == "README.md"
    blocks, section, i, lead = [], "", 0, []
    while i < len(lines):
        if lines[i].startswith("#"):
            lead = []
            if by_heading and lines[i].startswith("## "):
                section = lines[i][3:].strip()
        fence = _FENCE.match(lines[i])
        if not fence:
            lead.append(lines[i])
            i += 1
            continue
        start = i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        marker, reason = None, ""
        j = start - 1
        while j >= 0 and (not lines[j].strip() or lines[j].lstrip().startswith("<!--")):
            found = _MARKER.search(lines[j])
            if found:
                marker, reason = found.group(1), found.group(2)
                break
            j -= 1
        code = _SNIPPET.sub(
            lambda m: (ROOT / m.group(1)).read_text(encoding="utf-8").rstrip("\n"), "\n".join(body) + "\n"
        )
        blocks.append(Block(start + 1, fence.group(1), code, section, marker, reason, path, "\n".join(lead)))
        lead = []
        i += 1
    return blocks


BLOCKS = [block for document in DOCUMENTS for block in readme_blocks(path=document.relative_to(ROOT).as_posix())]


def of(lang: str) -> list[Block]:
    return [b for b in BLOCKS if b.lang == lang]


def params(lang: str) -> list:
    return [
        pytest.param(b, id=b.name, marks=pytest.mark.skip(reason=b.reason) if b.marker == "skip" else ())
        for b in of(lang)
    ]


# --- the harness itself ---------------------------------------------------------------------------


def test_every_block_has_a_known_language():
    unknown = [b.name for b in BLOCKS if b.lang not in LANGUAGES + OUTPUT]
    assert not unknown, (
        f"give these blocks one of {LANGUAGES}, or `text` for output "
        f"(or teach tests/test_readme.py a new language): {unknown}"
    )


def test_skip_markers_say_why_and_stay_rare():
    skipped = [b for b in BLOCKS if b.marker == "skip"]
    assert all(b.reason for b in skipped), [b.name for b in skipped if not b.reason]
    for document in DOCUMENTS:
        here = [b.name for b in skipped if b.path == document.relative_to(ROOT).as_posix()]
        assert len(here) <= 4, here


def test_the_docs_pages_have_blocks_to_run():
    pages = {b.path for b in BLOCKS if b.path != "README.md"}
    assert len(pages) >= 10, sorted(pages)


def needs_event_loop(code: str) -> bool:
    """True when the block awaits at the top level, as only a notebook or asyncio REPL runs it."""
    try:
        compile(code, "<block>", "exec")
    except SyntaxError:
        compile(code, "<block>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        return True
    return False


def test_blocks_that_await_say_how_to_run_them_in_a_script():
    silent = [
        b.name
        for b in of("python")
        if b.marker != "skip" and needs_event_loop(b.code) and "asyncio.run(" not in b.code + b.lead
    ]
    assert not silent, f"say how to run these in a script (`asyncio.run(main())`), just before the block: {silent}"


def test_the_parser_finds_blocks_markers_and_sections():
    text = "## A\n<!-- readme-test: skip needs a GPU -->\n```python\nx = 1\n```\n## B\n```bash\necho hi\n```\n"
    first, second = readme_blocks(text)
    assert (first.lang, first.marker, first.reason, first.section, first.code) == (
        "python",
        "skip",
        "needs a GPU",
        "A",
        "x = 1\n",
    )
    assert (second.lang, second.marker, second.section, second.line) == ("bash", None, "B", 7)
    on_a_page = readme_blocks(text, path="docs/page.md")
    assert [(b.section, b.name) for b in on_a_page] == [("", "docs/page.md:3:python"), ("", "docs/page.md:7:bash")]


def test_the_parser_includes_snippets_and_keeps_the_text_before_a_block():
    text = 'Run it:\n\n```yaml\n--8<-- "config.example.yaml"\n```\n'
    (block,) = readme_blocks(text, path="docs/page.md")
    assert block.code == (ROOT / "config.example.yaml").read_text(encoding="utf-8").rstrip("\n") + "\n"
    assert block.lead.strip() == "Run it:"


def test_the_entry_points_name_their_arguments_as_the_readme_does():
    import inspect

    from reflection import Reflector, reflect, reflect_sync
    from reflection.static import check_call

    for function in (reflect, reflect_sync, Reflector.reflect, check_call):
        assert "tools" in inspect.signature(function).parameters, function


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def judge_url():
    with StandInJudge(idle_timeout=600) as server:
        yield server.base_url


def with_judge(code: str, url: str) -> str:
    return _JUDGE_URL.sub(url, code)


def workdir(base: Path, judge_url: str) -> Path:
    """A directory laid out as a reader's would be: the examples, and a config pointing at the judge."""
    shutil.copytree(ROOT / "examples", base / "examples")
    shutil.copy(ROOT / "examples" / "calls.jsonl", base / "calls.jsonl")
    for name in ("predictions.jsonl", "references.jsonl"):
        shutil.copy(ROOT / "examples" / "scoring" / name, base / name)
    (base / "config.yaml").write_text(with_judge((ROOT / "config.example.yaml").read_text(), judge_url))
    for name in ("benchmarks", "prompts"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, base / name)
    return base


def shell_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["OPENAI_API_KEY"] = "sk-readme-test"  # the stand-in ignores it; the client wants one
    env.pop("COLUMNS", None)
    return env


# --- python -------------------------------------------------------------------------------------


def run_python(code: str, namespace: dict, name: str) -> None:
    compiled = compile(code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(compiled, namespace)  # noqa: S307 - the README's own code
    if asyncio.iscoroutine(result):
        asyncio.run(result)


def is_pytest_file(block: Block) -> bool:
    return any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")
        for node in ast.parse(block.code).body
    )


@pytest.mark.slow
@pytest.mark.parametrize("block", params("python"))
def test_python_block(block, tmp_path, monkeypatch, judge_url):
    monkeypatch.chdir(workdir(tmp_path, judge_url))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-readme-test")
    if is_pytest_file(block):
        (tmp_path / "test_from_readme.py").write_text(block.code)
        # Only the plugins the README names: pytest-asyncio (auto mode) and reflection's own.
        env = {**shell_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "asyncio",
                "-p",
                "reflection.testing.plugin",
                "-o",
                "asyncio_mode=auto",
                "test_from_readme.py",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        return
    namespace: dict = {"__name__": "__readme__"}
    earlier = [
        b
        for b in of("python")
        if b.path == block.path
        and b.section == block.section
        and b.line < block.line
        and b.marker != "skip"
        and not is_pytest_file(b)
    ]
    with small_ray(block.code):
        for b in [*earlier, block]:
            run_python(with_judge(b.code, judge_url), namespace, b.name)


@contextlib.contextmanager
def small_ray(code: str):
    """For a block that uses Ray: a local Ray sized for a test (2 CPUs, no dashboard), as
    `tests/test_batch_ray.py` starts it, instead of the default auto-started cluster."""
    if not re.search(r"^import ray\b", code, re.MULTILINE):
        yield
        return
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


# --- bash and console ---------------------------------------------------------------------------


_dirs: dict[str, Path] = {}


def shell_dir(block: Block, tmp_path: Path, judge_url: str) -> Path:
    if block.marker == "same-dir":
        previous = [b for b in BLOCKS if b.path == block.path and b.lang in ("bash", "console") and b.line < block.line]
        if previous and previous[-1].name in _dirs:
            path = _dirs[previous[-1].name]
            _dirs[block.name] = path
            return path
        pytest.fail(f"{block.name} continues the previous shell block, which did not run first")
    path = workdir(tmp_path, judge_url)
    _dirs[block.name] = path
    return path


def run_shell(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", code],
        cwd=cwd,
        env=shell_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
@pytest.mark.parametrize("block", params("bash"))
def test_bash_block(block, tmp_path, judge_url):
    cwd = shell_dir(block, tmp_path, judge_url)
    run = run_shell(_PIP.sub("", with_judge(block.code, judge_url)), cwd)
    assert run.returncode == 0, f"{block.name}\n{run.stdout}\n{run.stderr}"


def console_commands(block: Block) -> list[tuple[str, list[str]]]:
    """(command, shown output lines) for each `$ ` line of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.code.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line.rstrip())
    return steps


@pytest.mark.slow
@pytest.mark.parametrize("block", params("console"))
def test_console_block(block, tmp_path, judge_url):
    cwd = shell_dir(block, tmp_path, judge_url)
    steps = console_commands(block)
    assert steps, f"{block.name}: a console block shows `$ command` lines"
    for command, shown in steps:
        run = run_shell(_PIP.sub("", with_judge(command, judge_url)), cwd)
        assert run.returncode == 0, f"{block.name}: {command}\n{run.stdout}\n{run.stderr}"
        real = {line.rstrip() for line in (run.stdout + run.stderr).splitlines()}
        stable = [line for line in shown if line.strip() and line.strip() != "..." and not re.search(r"\d", line)]
        missing = [line for line in stable if line not in real]
        assert not missing, f"{block.name}: shown but not printed by `{command}`: {missing}\n{run.stdout}{run.stderr}"


# --- json and yaml ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def example_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("readme-json") / "rows.jsonl"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "reflection.cli",
            "check",
            str(ROOT / "examples" / "calls.jsonl"),
            "-o",
            str(out),
            "--static-only",
        ],
        env=shell_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    return {row["id"]: row for row in map(json.loads, out.read_text().splitlines())}


def differences(shown, real, path="$") -> list[str]:
    """Where the README's (abridged) value disagrees with the real one; "..." matches anything."""
    if shown == "...":
        return []
    if isinstance(shown, dict):
        if not isinstance(real, dict):
            return [f"{path}: README shows an object, the row has {real!r}"]
        out = []
        for key, value in shown.items():
            if key == "...":
                continue
            if key not in real:
                out.append(f"{path}.{key}: not in the row")
            else:
                out.extend(differences(value, real[key], f"{path}.{key}"))
        return out
    if isinstance(shown, list):
        if shown == ["..."]:
            return []
        if not isinstance(real, list) or len(real) < len(shown):
            return [f"{path}: README shows {len(shown)} items, the row has {real!r}"]
        return [d for i, item in enumerate(shown) for d in differences(item, real[i], f"{path}[{i}]")]
    return [] if shown == real else [f"{path}: README shows {shown!r}, the row has {real!r}"]


@pytest.mark.slow
@pytest.mark.parametrize("block", params("json"))
def test_json_block(block, example_rows):
    value = json.loads(block.code)
    if isinstance(value, dict) and value.get("id") in example_rows:
        assert differences(value, example_rows[value["id"]]) == []


@pytest.mark.parametrize("block", params("yaml"))
def test_yaml_block(block):
    value = yaml.safe_load(block.code)
    if isinstance(value, dict) and set(value) <= set(ReflectionConfig.model_fields):
        ReflectionConfig(**value)
