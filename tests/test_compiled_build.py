"""The wheel `pip install .` builds: hatch_build.py compiles the modules pyproject.toml names with
mypyc. CI's suite runs on the editable (pure-Python) install, so the compiled modules users get are
tested here: the wheel is built once per run, and the tests that exercise those modules run again
against it, in a process that imports the compiled package, not this checkout's sources."""

import ast
import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The test modules that exercise the compiled modules (found by `grep -l` on their imports, plus the
# batch workers and the check command that run them): the static checks and their conformance and
# name suites, formats, grounding, corrections, results, the JSON scans, hostile input (core and
# batch I/O), the sinks' golden rows, the gate, and the check command with and without workers.
COMPILED_SUITE = [
    "tests/test_static.py",
    "tests/test_static_bounds.py",
    "tests/test_static_conformance.py",
    "tests/test_static_names.py",
    "tests/test_static_properties.py",
    "tests/test_formats.py",
    "tests/test_formats_responses.py",
    "tests/test_grounding.py",
    "tests/test_corrections.py",
    "tests/test_results.py",
    "tests/test_json.py",
    "tests/test_hostile_core.py",
    "tests/test_history_properties.py",
    "tests/test_tool_spec_cache.py",
    "tests/test_sinks.py",
    "tests/test_gate.py",
    "tests/test_gate_formats.py",
    "tests/batch/test_workers.py",
    "tests/batch/test_hostile_io.py",
    "tests/batch/test_batch_cli.py",
    "tests/cli/test_cli.py",
    "tests/cli/test_flat_output.py",
    "tests/cli/test_cli_exit_codes.py",
]

# Loaded by the inner pytest run (`-p`): which file each reflection module came from.
_IMPORTED_FILES_PLUGIN = """
import json, os, sys

def pytest_sessionfinish(session):
    files = {name: getattr(module, "__file__", None) for name, module in sys.modules.items()
             if name == "reflection" or name.startswith("reflection.")}
    with open(os.environ["COMPILED_BUILD_IMPORTS"], "w") as out:
        json.dump(files, out)
"""


def compiled_modules() -> list[str]:
    """The modules the wheel carries compiled: pyproject.toml's list (hatch_build.py reads it too)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return config["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["custom"]["modules"]


@pytest.fixture(scope="module")
def compiled_wheel(tmp_path_factory) -> Path:
    """The standard wheel, built once for this module's tests (mypyc: about a minute)."""
    hatchling = pytest.importorskip("hatchling.builders.wheel")
    pytest.importorskip("mypyc")
    if shutil.which("git") is None:
        pytest.skip("needs git")
    if shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is None:
        pytest.skip("no C compiler: the hook builds a pure-Python wheel")
    directory = tmp_path_factory.mktemp("wheel")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("REFLECTION_PURE_PYTHON", raising=False)
        builder = hatchling.WheelBuilder(str(ROOT))
        return Path(next(iter(builder.build(directory=str(directory), versions=["standard"]))))


@pytest.mark.slow
def test_a_standard_wheel_carries_the_compiled_modules(compiled_wheel, tmp_path):
    """With a C compiler, the standard wheel ships the modules pyproject.toml names compiled
    (beside their sources), and they are what the installed package imports."""
    wheel = zipfile.ZipFile(compiled_wheel)
    names = wheel.namelist()
    for module in compiled_modules():
        stem = module.removesuffix(".py")
        assert module in names and any(n.startswith(stem + ".cpython-") and n.endswith(".so") for n in names)
    assert "-py3-none-any.whl" not in compiled_wheel.name  # tagged for this interpreter and platform
    site = tmp_path / "site"
    wheel.extractall(site)
    code = "import reflection.static as s, reflection.rows as r; print(s.__file__); print(r.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(site)}, capture_output=True, text=True
    )
    compiled, plain = out.stdout.split()
    assert compiled.endswith(".so") and plain.endswith("rows.py")  # rows.py stays Python (pickled rows)


@pytest.mark.slow
def test_the_compiled_modules_pass_their_tests(compiled_wheel, tmp_path):
    """COMPILED_SUITE runs against the installed wheel: installed with pip (its runtime
    dependencies are this environment's), first on the path, with the checkout neither the working
    directory nor on the path (the tests' directories are, as pytest puts them there); every
    reflection module that run imported comes from the wheel, the listed ones as extensions."""
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile"]
    subprocess.run([*pip, "--target", str(site), str(compiled_wheel)], check=True, capture_output=True)
    (tmp_path / "_imported_files.py").write_text(_IMPORTED_FILES_PLUGIN)
    imports = tmp_path / "imports.json"
    env = {name: value for name, value in os.environ.items() if not name.startswith("REFLECTION_")}
    env |= {
        "PYTHONPATH": os.pathsep.join([str(site), str(tmp_path)]),
        "PATH": os.pathsep.join([str(site / "bin"), env.get("PATH", "")]),
        "COMPILED_BUILD_IMPORTS": str(imports),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_imported_files"]
        + ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), "--confcutdir", str(ROOT / "tests")]
        + [str(ROOT / test) for test in COMPILED_SUITE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    files = json.loads(imports.read_text())
    assert {name: file for name, file in files.items() if file and not file.startswith(str(site))} == {}
    for module in compiled_modules():
        name = module.removesuffix(".py").replace("/", ".")
        assert files[name].endswith(".so"), name


# Parameters annotated `float` alone that never receive input's numbers, and why.
INTERNAL_FLOATS = {
    ("reflection/results.py", "output_row", "latency_ms"): "the caller's own clock (perf_counter), never input",
}


def _names(annotation: ast.expr) -> set[str]:
    """The names an annotation uses, quoted ones too."""
    names = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names |= _names(ast.parse(node.value, mode="eval").body)
    return names


def test_no_compiled_function_takes_a_float_that_input_can_give_as_an_int():
    """Compiled code holds annotations at run time: a JSON integer given to a parameter annotated
    `float` becomes a C double in mypyc's code (precision lost past 2**53, OverflowError past
    about 1e308: an error row instead of a result) where the pure-Python code keeps it whole
    (grounding's number_sources was one). A parameter that may receive an input's number says
    `int | float` (or `Any`); one that never does is named in INTERNAL_FLOATS, with why."""
    found = set()
    for module in compiled_modules():
        for node in ast.walk(ast.parse((ROOT / module).read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = node.args
                for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                    annotation = _names(argument.annotation) if argument.annotation else set()
                    if "float" in annotation and "int" not in annotation:
                        found.add((module, node.name, argument.arg))
    assert found == set(INTERNAL_FLOATS)


# Run by test_compiled_and_pure_python_agree_on_every_json_type_anywhere under each build: each
# row's output line as the workers write it (latency aside), or the exception that escaped.
_ROW_BY_ROW = """
import re, sys
from reflection.batch._static import static_line
from reflection.rows import parse_line, read_row

for number, line in enumerate(open(sys.argv[1], "rb").read().split(b"\\n"), start=1):
    try:
        out = static_line(read_row(parse_line(line), number))[1]
    except Exception as exc:
        out = f"{type(exc).__name__}: {exc}".encode()
    sys.stdout.buffer.write(re.sub(rb'"latency_ms":[0-9.e+-]+', b"", out).rstrip(b"\\n") + b"\\n")
"""

# What a hostile row puts where the schema or the call expects something else.
_ANY_JSON = [0, -1, 2**63, 2**64 + 1, 10**400, 1.5, 1e308, -0.0, True, None, "", "1", [], {}, [1, "a"], {"a": 1}]


def _type_mutated(lines: list[bytes], seed: int) -> list[bytes]:
    """Each row with one to three of its values (anywhere: tools, call, history) replaced by a
    JSON value of another type; lines json cannot read (or write back) are kept as they are."""
    rng = random.Random(seed)
    out = []
    for line in lines:
        try:
            row = json.loads(line)
            for _ in range(rng.choice([1, 1, 2, 3])):
                paths = list(_paths(row))
                if not paths:
                    break
                *parents, last = rng.choice(paths)
                node = row
                for key in parents:
                    node = node[key]
                node[last] = json.loads(json.dumps(rng.choice(_ANY_JSON)))
            out.append(json.dumps(row).encode())
        except (ValueError, RecursionError):
            out.append(line.strip())
    return out


def _paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every position in a JSON value, as the keys and indexes that reach it."""
    if isinstance(node, dict):
        items: Iterable[tuple[Any, Any]] = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return
    for key, value in items:
        yield (*path, key)
        yield from _paths(value, (*path, key))


@pytest.mark.slow
def test_compiled_and_pure_python_agree_on_every_json_type_anywhere(compiled_wheel, tmp_path):
    """The annotation risk found by running, not reading: every static-path row of the sinks'
    corpus (every spec, call and history shape), type-mutated, through the workers' row function
    under the compiled wheel and under this checkout's sources. A parameter annotated narrower
    than what input can bring raises TypeError in compiled code only (an error row, or an
    escaping exception, where pure Python gives a result): the lines would differ."""
    from _sink_corpus import corpus

    site = tmp_path / "site"
    with zipfile.ZipFile(compiled_wheel) as wheel:
        wheel.extractall(site)
    rows = tmp_path / "rows.jsonl"
    rows.write_bytes(b"\n".join(_type_mutated(corpus(1500, 3), seed=3)))
    script = tmp_path / "row_by_row.py"
    script.write_text(_ROW_BY_ROW)
    env = {name: value for name, value in os.environ.items() if not name.startswith("REFLECTION_")}
    outputs = {}
    for build, path in (("compiled", site), ("pure", ROOT)):
        code = f"import reflection.static as s; assert s.__file__.endswith({'.so' if build == 'compiled' else '.py'!r})"
        subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env | {"PYTHONPATH": str(path)}, check=True)
        done = subprocess.run(
            [sys.executable, str(script), str(rows)],
            cwd=tmp_path,
            env=env | {"PYTHONPATH": str(path)},
            capture_output=True,
            check=True,
        )
        outputs[build] = done.stdout.splitlines()
    assert len(outputs["pure"]) == len(outputs["compiled"]) > 1500
    pairs = enumerate(zip(outputs["pure"], outputs["compiled"], strict=True), start=1)
    assert [(number, pure, compiled) for number, (pure, compiled) in pairs if pure != compiled] == []
