"""The static stage against a subset of the official JSON Schema Test Suite (issue 21).

`json_schema_suite_subset.jsonl` holds the object-instance tests of the suite files that
exercise what the name check must follow (references by pointer, anchor, `$id` and
`$dynamicRef`, in-place branches, required and dependent names) and the draft-7 forms, each
wrapped as a tool call. It is written by `benchmarks/conformance_static.py --write-subset`
from the suite in the `jsonschema` sdist (MIT; the licence is on the file's first line);
the benchmark measures the whole suite.

Every test agrees with the suite, except where the documented unknown-name rule decides: a
valid instance with an argument name the schema defines nowhere fails `non_existent_parameter`
alone, and the flagged names occur nowhere in the schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reflection.model import STATIC_CHECKS
from reflection.static import check_call

SUBSET = Path(__file__).with_name("json_schema_suite_subset.jsonl")


def _cases() -> list[Any]:
    lines = SUBSET.read_text().splitlines()
    header = json.loads(lines[0])
    assert "MIT" in header["license"] or "Permission is hereby granted" in header["license"]
    out = []
    for line in lines[1:]:
        group = json.loads(line)
        for test in group["tests"]:
            out.append(
                pytest.param(
                    group["schema"], test, id=f"{group['draft']}/{group['file']}: {group['group']} / {test['test']}"
                )
            )
    return out


def _mentions(node: Any, name: str) -> bool:
    if isinstance(node, dict):
        return any(key == name or _mentions(value, name) for key, value in node.items())
    if isinstance(node, list):
        return any(_mentions(item, name) for item in node)
    return node == name


@pytest.mark.parametrize(("schema", "test"), _cases())
def test_the_static_stage_agrees_with_the_json_schema_test_suite(schema, test):
    result = check_call({"name": "t", "arguments": test["data"]}, [{"name": "t", "parameters": schema}])
    failing = [name for name in STATIC_CHECKS if not result.checks[name].passed]
    if test["unknown_name_rule"]:
        flagged = [f.actual for f in result.checks["non_existent_parameter"].findings]
        assert test["valid"] and failing == ["non_existent_parameter"], result.findings()
        assert flagged and not any(_mentions(schema, name) for name in flagged)
    else:
        assert result.valid == test["valid"], result.findings()
    if test["valid"]:
        assert result.correction is None or set(result.correction.arguments) >= {
            name for name in test["data"] if _mentions(schema, name)
        }


def test_the_subset_is_representative():
    cases = _cases()
    assert len(cases) > 250
    ruled = [c for c in cases if c.values[1]["unknown_name_rule"]]
    assert len(ruled) < 10  # the documented rule decides a handful, everything else agrees outright
