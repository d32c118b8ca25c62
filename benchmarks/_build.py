"""Which build of `reflection` an interpreter imports (bench_static.py and bench_serve.py print it
before they time it): compiled by mypyc, as `pip install .` builds it where a C compiler is, or pure
Python (an editable install, a checkout on PYTHONPATH), and from where."""

from __future__ import annotations

import subprocess


def build_of(python: str, env: dict[str, str], cwd: str) -> str:
    """ "compiled (FILE)" or "pure Python (FILE)": `reflection.static` as `python` imports it with
    `env` from `cwd` (`python -c` puts `cwd` first on the path)."""
    static = subprocess.run(
        [python, "-c", "import reflection.static as s; print(s.__file__)"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return f"{'pure Python' if static.endswith('.py') else 'compiled'} ({static})"
