"""The body of `reflection score`; `reflection.cli` registers it as `app.command("score")(score)`.

Holds no scoring logic: it reads options, streams `reflection.scoring.files.score_files` and
prints. Rows go to `--output` (or stdout); the summary goes to stdout when rows went to a
file, else to stderr, so stdout stays pure JSON Lines when piped.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from reflection._json import dumps
from reflection.scoring.files import ScoreSummary, score_files

__all__ = ["score"]


def score(
    predictions: Path = typer.Argument(
        ..., exists=True, dir_okay=False, readable=True,
        help="JSON Lines: {id, tool_calls | tool_call | messages, response?} per row.",
    ),
    references: Path = typer.Option(
        ..., "--references", exists=True, dir_okay=False, readable=True,
        help="JSON Lines: {id, expected_tool_calls, query?, tools?, expected_response?} per row.",
    ),
    output: Path | None = typer.Option(None, "-o", "--output", help="Write per-sample rows here (default: stdout)."),
    json_summary: bool = typer.Option(False, "--json-summary", help="Print the summary as one JSON object instead of a table."),
) -> None:
    """Score PREDICTIONS against --references (joined by id): per-sample JSON Lines and a summary."""
    summary = ScoreSummary()
    out = output.open("w", encoding="utf-8") if output else sys.stdout
    try:
        for row in score_files(predictions, references):
            summary.add(row)
            out.write(dumps(row) + "\n")
    finally:
        if output:
            out.close()
        else:
            out.flush()
    stream = sys.stdout if output else sys.stderr
    data = summary.to_dict()
    if json_summary:
        stream.write(dumps(data) + "\n")
    else:
        Console(file=stream, soft_wrap=True).print(_table(data))


def _table(data: dict[str, Any]) -> Table:
    table = Table(title="reflection score", title_justify="left")
    table.add_column("metric")
    table.add_column("mean", justify="right")
    table.add_column("n", justify="right")
    for name, stats in data["metrics"].items():
        mean = "-" if stats["mean"] is None else f"{stats['mean']:.3f}"
        table.add_row(name, mean, str(stats["n"]))
    table.add_section()
    overall = data["overall_score"]
    weights = data["weights"]
    label = "overall ({:.2f}/{:.2f}/{:.2f}/{:.2f})".format(
        weights["tool_selection_accuracy"], weights["parameter_accuracy"],
        weights["execution_success"], weights["response_quality"])
    table.add_row(label, "-" if overall is None else f"{overall:.3f} {data['interpretation']}", "")
    table.add_row("rows", str(data["rows"]), "")
    table.add_row("error rows", str(data["error_rows"]), "")
    table.add_row("no call when one was expected", str(data["no_call"]), "")
    table.add_row("call to a tool not in the inventory", str(data["unknown_tool"]), "")
    if data["metrics"]["response_exact_match"]["n"] and not data["metrics"]["response_rouge_l"]["n"]:
        table.caption = "response_rouge_l needs the metrics extra: pip install 'reflection[metrics]'"
    return table
