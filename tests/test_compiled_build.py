"""The wheel `pip install .` builds: hatch_build.py compiles the modules pyproject.toml names with
mypyc. CI's suite runs on the editable (pure-Python) install, so the compiled modules users get are
tested here: the wheel is built once per run, and the tests that exercise those modules run again
against it, in a process that imports the compiled package, not this checkout's sources."""

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

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
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(site)]
        + [str(compiled_wheel)],
        check=True,
        capture_output=True,
    )
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
