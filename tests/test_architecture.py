"""The package's structure, held: imports run one way (no circle, type-only imports included),
privacy is at the module level (no underscored name is imported from another module), and the
base layer stays at the base.

Read from the source with `ast`, so every import counts: those inside functions (lazy ones) and
under `if TYPE_CHECKING:` too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import reflection

PACKAGE = Path(reflection.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imported(name: str) -> list[tuple[str, str | None, int]]:
    """(module, name taken from it or None, line) for every `reflection` import in module `name`;
    `from package import submodule` counts as importing the submodule."""
    found = []
    for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "reflection":
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule in MODULES:
                    found.append((submodule, None, node.lineno))
                else:
                    found.append((node.module, alias.name, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names if alias.name in MODULES]
    return found


def _imports(name: str) -> set[str]:
    return {module for module, _, _ in _imported(name) if module != name}


def test_no_module_imports_itself_back_through_others():
    graph = {name: _imports(name) for name in MODULES}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import circle: {' -> '.join((*path[path.index(name) :], name))}"
        if name in done:
            return
        for other in sorted(graph[name]):
            visit(other, (*path, name))
        done.add(name)

    for name in graph:
        visit(name, ())


def test_no_underscored_name_is_imported_from_another_module():
    # Privacy is at the module level: `reflection/_x.py` may be imported by its package, a
    # `_name` inside a module may not be used by another one.
    crossing = [
        f"{MODULES[name].relative_to(PACKAGE.parent)}:{line}: {module}.{taken}"
        for name in MODULES
        for module, taken, line in _imported(name)
        if taken is not None and taken.startswith("_") and not taken.startswith("__") and module != name
    ]
    assert crossing == []


def test_the_base_layer_imports_nothing_above_it():
    base = {
        "reflection._json",
        "reflection._lru",
        "reflection._slices",
        "reflection._text",
        "reflection._version",
        "reflection.errors",
    }
    for name in (*base, "reflection.telemetry"):
        assert _imports(name) <= base, (name, _imports(name) - base)
    assert _imports("reflection.results") == set()  # the result data contract stands on nothing


def test_a_worker_of_the_service_never_imports_the_command_line():
    assert not any(module.startswith("reflection.cli") for module in _imports("reflection.service._worker"))
    assert "reflection.cli" not in _imports("reflection.config")
