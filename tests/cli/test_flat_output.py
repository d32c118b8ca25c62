"""`--flat`: verdicts at scale, the same values as the full rows without the structured results."""

import json

import pytest
from typer.testing import CliRunner

from reflection._resources import example_path
from reflection.cli import app

runner = CliRunner()


def rows_of(path):
    return {row["id"]: row for row in map(json.loads, path.read_text().splitlines())}


@pytest.mark.parametrize("command", ["check", "batch"])
def test_flat_rows_hold_the_full_rows_verdict_and_flat_keys_only(tmp_path, command):
    full, flat = tmp_path / "full.jsonl", tmp_path / "flat.jsonl"
    src = str(example_path("calls.jsonl"))
    extra = ["--no-progress"] if command == "batch" else []
    assert runner.invoke(app, [command, src, "-o", str(full), "--static-only", *extra]).exit_code == 0
    result = runner.invoke(app, [command, src, "-o", str(flat), "--static-only", "--flat", *extra])
    assert result.exit_code == 0, result.output
    full_rows, flat_rows = rows_of(full), rows_of(flat)
    assert full_rows.keys() == flat_rows.keys()
    for rid, row in flat_rows.items():
        if "error" in row:
            assert row == full_rows[rid]  # error rows are the same in both
            continue
        expected = {
            k: v
            for k, v in full_rows[rid].items()
            if k in ("id", "overall_valid") or k.startswith(("static_", "semantic_"))
        }
        assert row == expected
        assert list(row)[:2] == ["id", "overall_valid"]
    assert (
        flat_rows["parallel"]["static_non_existent_function"] == full_rows["parallel"]["static_non_existent_function"]
    )
