"""Agreement of the static stage with the official JSON Schema Test Suite (issue 21).

The suite (json-schema-org/JSON-Schema-Test-Suite, MIT) ships inside the `jsonschema` sdist on
PyPI; `suite_dir()` downloads the sdist of the installed `jsonschema` version once
(`pip download`, cached under `benchmarks/.cache/`), or `--suite DIR` names a checkout's `tests`
folder. Every test whose instance is a JSON object (a tool call's arguments always are), core and
`optional/` (formats included), is wrapped as a tool call: the test's schema as the tool's
parameters, the instance as its arguments. Agreement is `check_call(...).valid == test["valid"]`.

Left out, and counted: tests whose schema needs a document from the suite's `remotes/` (the
static stage never fetches a remote `$ref`; it reports `invalid_api_spec`), found by asking the
reference implementation with an empty registry.

Each disagreement is put in one bucket:
- unknown-name rule: the documented rule (an argument name the schema defines nowhere fails
  `non_existent_parameter`, even without `additionalProperties: false`) is the only failing
  check, and no flagged name appears anywhere in the schema document (a textual check that
  does not trust reflection's own name resolution). These are reported and excluded.
- other: anything else (listed with `--list`).

For scale, the reference `jsonschema` (the draft's validator with its format checker, and the
suite's remotes preloaded) is scored on the same tests in the same run.

Draft 7 is measured twice: with the draft declared (`$schema` added where the schema has none,
as a tool spec would declare it) and undeclared (the suite's schemas as they are, so the static
stage's draft rule for a spec without `$schema` decides).

    python benchmarks/conformance_static.py [--suite DIR] [--list] [--write-subset PATH]

`--write-subset` writes the small subset `tests/test_static_conformance.py` runs (names
resolved through references, required and dependent names, draft-7 forms): every object test
of the files in `SUBSET`, with the suite's licence.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
from collections import Counter
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema

from reflection.static import check_call

_CACHE = Path(__file__).resolve().parent / ".cache"
_DRAFT7 = "http://json-schema.org/draft-07/schema#"
_REFERENCE = {"draft2020-12": jsonschema.Draft202012Validator, "draft7": jsonschema.Draft7Validator}
_SPECS = {"draft2020-12": referencing.jsonschema.DRAFT202012, "draft7": referencing.jsonschema.DRAFT7}


def suite_dir() -> Path:
    """The suite's `json` folder from the installed `jsonschema` version's sdist, downloaded once."""
    release = version("jsonschema")
    target = _CACHE / f"jsonschema-{release}"
    if (target / "json" / "tests").is_dir():
        return target / "json"
    _CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            str(_CACHE),
            f"jsonschema=={release}",
        ],
        check=True,
    )
    with tarfile.open(_CACHE / f"jsonschema-{release}.tar.gz") as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(f"jsonschema-{release}/json/")]
        archive.extractall(_CACHE, members, filter="data")
    return target / "json"


def cases(tests: Path, draft: str) -> Iterator[tuple[str, str, Any, str, dict[str, Any], bool]]:
    """(file, group, schema, test, instance, valid) for every test with an object instance."""
    folder = tests / draft
    for path in sorted(folder.rglob("*.json")):
        for group in json.loads(path.read_text()):
            for test in group["tests"]:
                if isinstance(test["data"], dict):
                    yield (
                        str(path.relative_to(folder)),
                        group["description"],
                        group["schema"],
                        test["description"],
                        test["data"],
                        test["valid"],
                    )


def remotes(root: Path, draft: str) -> referencing.Registry:
    """The suite's `remotes/` served at http://localhost:1234/, as its own runner does."""
    resources = []
    for path in (root / "remotes").rglob("*.json"):
        uri = "http://localhost:1234/" + path.relative_to(root / "remotes").as_posix()
        contents = json.loads(path.read_text())
        resources.append((uri, referencing.Resource.from_contents(contents, default_specification=_SPECS[draft])))
    return referencing.Registry().with_resources(resources)


def _reference(draft: str, schema: Any, instance: Any, registry: referencing.Registry) -> bool:
    cls = _REFERENCE[draft]
    return cls(schema, registry=registry, format_checker=cls.FORMAT_CHECKER).is_valid(instance)


def _needs_remote(draft: str, schema: Any, instance: Any) -> bool:
    try:
        _reference(draft, schema, instance, referencing.Registry())
    except referencing.exceptions.Unresolvable:
        return True
    except Exception:  # noqa: BLE001 - anything else is the reference's own business
        return False
    return False


def _mentions(node: Any, name: str) -> bool:
    """Whether `name` is a key or a string anywhere in the schema document."""
    if isinstance(node, dict):
        return any(key == name or _mentions(value, name) for key, value in node.items())
    if isinstance(node, list):
        return any(_mentions(item, name) for item in node)
    return node == name


def run(root: Path, draft: str, declare: bool, show: bool) -> dict[str, Any]:
    registry = remotes(root, draft)
    counts: Counter[str] = Counter()
    listed: list[str] = []
    for file, group, schema, test, instance, valid in cases(root / "tests", draft):
        counts["object tests"] += 1
        if _needs_remote(draft, schema, instance):
            counts["left out: needs a remote document"] += 1
            continue
        counts["compared"] += 1
        try:
            counts["reference agrees"] += _reference(draft, schema, instance, registry) == valid
        except Exception:  # noqa: BLE001 - the reference failing counts as a disagreement
            counts["reference failed"] += 1
        parameters = schema
        if declare and isinstance(schema, dict) and "$schema" not in schema:
            parameters = {"$schema": _DRAFT7, **schema}
        result = check_call({"name": "t", "arguments": instance}, [{"name": "t", "parameters": parameters}])
        if result.valid == valid:
            counts["agree"] += 1
            continue
        failing = [name for name, check in result.checks.items() if not check.passed]
        flagged = [f.actual for f in result.checks["non_existent_parameter"].findings]
        if valid and failing == ["non_existent_parameter"] and not any(_mentions(schema, name) for name in flagged):
            counts["unknown-name rule"] += 1
            bucket = "unknown-name rule"
        else:
            counts["other"] += 1
            bucket = "other"
        if show:
            listed.append(
                f"  [{bucket}] {file}: {group} / {test}: suite says {'valid' if valid else 'invalid'}, "
                f"reflection fails {failing or 'nothing'}: " + "; ".join(f.message[:160] for f in result.findings()[:2])
            )
    return {"counts": counts, "listed": listed}


SUBSET = {
    "draft2020-12": [
        "ref.json",
        "dynamicRef.json",
        "required.json",
        "dependentRequired.json",
        "dependentSchemas.json",
        "allOf.json",
        "oneOf.json",
        "not.json",
        "propertyNames.json",
        "minProperties.json",
        "optional/id.json",
        "optional/anchor.json",
        "optional/dependencies-compatibility.json",
        "optional/refOfUnknownKeyword.json",
    ],
    "draft7": ["ref.json", "items.json", "additionalItems.json", "definitions.json", "dependencies.json"],
}


def write_subset(root: Path, path: Path) -> None:
    """The tests' subset: per test, the suite's verdict and whether the unknown-name rule decides it."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for draft, files in SUBSET.items():
        wanted = set(files)
        for file, group, schema, test, instance, valid in cases(root / "tests", draft):
            if file not in wanted or not isinstance(schema, dict) or _needs_remote(draft, schema, instance):
                continue  # (a tool's parameters are an object)
            parameters = {"$schema": _DRAFT7, **schema} if draft == "draft7" and "$schema" not in schema else schema
            result = check_call({"name": "t", "arguments": instance}, [{"name": "t", "parameters": parameters}])
            flagged = [f.actual for f in result.checks["non_existent_parameter"].findings]
            rule = (
                valid
                and [n for n, c in result.checks.items() if not c.passed] == ["non_existent_parameter"]
                and not any(_mentions(schema, name) for name in flagged)
            )
            entry = groups.setdefault(
                (draft, file, group), {"draft": draft, "file": file, "group": group, "schema": parameters, "tests": []}
            )
            entry["tests"].append({"test": test, "data": instance, "valid": valid, "unknown_name_rule": rule})
    licence = (root / "LICENSE").read_text()
    header = {
        "source": f"JSON-Schema-Test-Suite, from the jsonschema {version('jsonschema')} sdist on PyPI: "
        "the object-instance tests of the files listed; draft-7 schemas declare $schema",
        "files": SUBSET,
        "license": licence,
    }
    lines = [json.dumps(header)] + [json.dumps(g, ensure_ascii=False) for g in groups.values()]
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {sum(len(g['tests']) for g in groups.values())} tests in {len(groups)} groups to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", type=Path, help="the suite's `json` folder (with tests/ and remotes/)")
    parser.add_argument("--list", action="store_true", help="list every disagreement")
    parser.add_argument("--write-subset", type=Path, help="write the tests' subset (JSON Lines) here and stop")
    args = parser.parse_args()
    root = args.suite or suite_dir()
    if args.write_subset:
        write_subset(root, args.write_subset)
        return
    print(f"suite: {root} (object instances, core and optional)")
    for draft, declare, label in [
        ("draft2020-12", False, "draft 2020-12"),
        ("draft7", True, "draft 7, declared"),
        ("draft7", False, "draft 7, undeclared"),
    ]:
        out = run(root, draft, declare, args.list)
        c = out["counts"]
        compared, rule = c["compared"], c["unknown-name rule"]
        judged = compared - rule
        print(
            f"{label:<20} {c['object tests']} object tests, {c['left out: needs a remote document']} left out "
            f"(remote document); {compared} compared"
        )
        print(
            f"{'':<20} reflection agrees on {c['agree']}/{compared} ({c['agree'] / compared:.1%}); "
            f"unknown-name rule excluded ({rule} tests): {c['agree']}/{judged} ({c['agree'] / judged:.1%}); "
            f"other disagreements: {c['other']}"
        )
        print(
            f"{'':<20} reference jsonschema agrees on {c['reference agrees']}/{compared} "
            f"({c['reference agrees'] / compared:.1%})"
        )
        for line in out["listed"]:
            print(line)


if __name__ == "__main__":
    main()
