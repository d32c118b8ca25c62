"""Hatchling build hook: the wheel carries the static stage's per-row modules compiled by mypyc.

`pip install .` (a "standard" wheel) compiles the modules `[tool.hatch.build.targets.wheel.hooks.custom]`
names from this checkout's sources with mypyc (from the pinned mypy the hook requires), in a
temporary copy of the package, and ships the extensions beside the sources: Python imports an
extension before the module's source, and the sources stay as they are for tracebacks and
tools. Nothing is downloaded but the build requirements; nothing compiled is written into the
checkout. The wheel is pure Python, as before, when:

- the wheel is an editable one (`pip install -e .`): the sources run as they are edited;
- `REFLECTION_PURE_PYTHON` is set (to anything but empty);
- there is no C compiler (the one this Python was built with, `sysconfig`'s CC).

A compiler that is there but fails stops the build with mypyc's output: a wheel silently slower
than its sources say is worse than an error that names the way out (`REFLECTION_PURE_PYTHON=1`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

OPT_OUT = "REFLECTION_PURE_PYTHON"


class MypycBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        self._work: Path | None = None
        if version != "standard":
            return
        if os.environ.get(OPT_OUT):
            self.app.display_info(f"{OPT_OUT} is set: a pure-Python wheel")
            return
        compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")[0]
        if shutil.which(compiler) is None:
            self.app.display_warning(f"no C compiler ({compiler}): a pure-Python wheel, slower on the static path")
            return
        modules: list[str] = self.config["modules"]
        self._work = Path(tempfile.mkdtemp(prefix="reflection-mypyc-"))
        package = Path(self.root) / "reflection"
        shutil.copytree(package, self._work / "reflection", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        # Run where no pyproject.toml is: setuptools (mypyc's C build) would read this one's.
        done = subprocess.run(
            [sys.executable, "-m", "mypyc", *modules],
            cwd=self._work,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        if done.returncode:
            raise RuntimeError(f"mypyc failed (set {OPT_OUT}=1 for a pure-Python wheel):\n{done.stdout[-5000:]}")
        built = [path for path in self._work.rglob("*.so") if "build" not in path.relative_to(self._work).parts]
        for path in built:
            build_data["force_include"][str(path)] = path.relative_to(self._work).as_posix()
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        self.app.display_info(f"mypyc compiled {len(modules)} modules into {len(built)} extensions")

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)
