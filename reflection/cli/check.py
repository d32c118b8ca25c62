"""`reflection check`: reflect every row of a file and write one JSON result row per row.

Options in, library calls out: `reflection.batch.runner` reflects (in worker processes when no
judge runs, see `--workers`), this module writes the rows and counts the verdicts.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import typer

from reflection._gc import freeze_at_exit
from reflection._json import dumps
from reflection._log import warnings_to_stderr
from reflection.batch._workers import default_workers
from reflection.batch.inputs import check_input
from reflection.batch.runner import reflect_dataset, static_lines
from reflection.cli.batch import WORKERS_HELP
from reflection.cli.common import (
    FAIL_ON_HELP,
    drop_unawaited_quietly,
    fail_on_option,
    open_text_output,
    refuse_input_as_output,
    stdout_closed,
    user_errors,
    verdict_exit,
)
from reflection.config import ReflectionConfig, load_config

__all__ = ["check"]


@user_errors
def check(
    input: Path = typer.Argument(
        ..., help="Rows {id, tools, history, call | tool_calls}: .jsonl, .json (array), .csv or .parquet, as for batch."
    ),
    output: Path | None = typer.Option(None, "-o", "--output", help="Write result rows here (default: stdout)."),
    static_only: bool = typer.Option(False, "--static-only", help="Run only the static checks and grounding."),
    config: Path | None = typer.Option(
        None, "--config", exists=True, dir_okay=False, help="YAML config (see config.example.yaml)."
    ),
    base_url: str | None = typer.Option(None, "--base-url", help="Judge endpoint (OpenAI-compatible)."),
    model: str | None = typer.Option(None, "--model", help="Judge model name."),
    mode: str | None = typer.Option(None, "--mode", help="combined (one request per call) or per_check."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Rows reflected at once."),
    flat: bool = typer.Option(False, "--flat", help="Write only id, overall_valid, the flat keys and error per row."),
    workers: int | None = typer.Option(None, "--workers", min=1, help=WORKERS_HELP),
    fail_on: list[str] = typer.Option(
        [], "--fail-on", callback=fail_on_option, metavar="invalid|unknown|error", help=FAIL_ON_HELP
    ),
) -> None:
    """Reflect every row of INPUT and write one JSON result row per input row.

    Exit status: 0 done, 1 a --fail-on row, 2 user error, 3 the judge answered no row it was
    asked about, 141 stdout closed (| head)."""
    warnings_to_stderr()
    cfg = load_config(config, static_only=static_only, base_url=base_url, model=model, mode=mode)
    check_input(input)
    refuse_input_as_output(output, input)
    out = open_text_output(output) if output else sys.stdout
    if cfg.judge is None:
        reason = (
            "--static-only"
            if static_only
            else "no judge configured (use --config, REFLECTION_JUDGE__*, or --base-url/--model)"
        )
        typer.echo(f"judge skipped: {reason}; running static checks and grounding only", err=True)
    try:  # a judge that cannot answer at all (JudgeFatalError) stops the run: a user error
        if cfg.judge is None:
            counts = anyio.run(
                _write_lines, static_lines(input, cfg, workers=workers or default_workers(), flat=flat), out
            )
            counts["judge_skipped"] = counts["rows"] - counts["error"]
            # At exit only: a caller running the command in its own process keeps its collector.
            freeze_at_exit()
        else:
            counts = anyio.run(_check_file, input, out, cfg, concurrency, flat)
        out.flush()  # here, not at exit: a closed stdout (`| head`) is caught by user_errors
    finally:
        if output:
            out.close()
    typer.echo(
        f"{counts['rows']} rows: {counts['valid']} valid, {counts['invalid']} invalid, "
        f"{counts['unknown']} unknown, {counts['error']} error",
        err=True,
    )
    status = verdict_exit(counts, fail_on)
    if status:
        raise typer.Exit(status)


def _new_counts() -> dict[str, int]:
    return {"rows": 0, "valid": 0, "invalid": 0, "unknown": 0, "error": 0, "judge_skipped": 0}


async def _write_lines(lines: Any, out: Any) -> dict[str, int]:
    counts = _new_counts()
    binary = getattr(out, "buffer", None)  # the lines are UTF-8 already: no decoding and encoding again
    if binary is not None:
        out.flush()
    write = binary.write if binary is not None else lambda line: out.write(line.decode())
    async for summary, line in lines:
        _tally(counts, summary)
        write(line)
    return counts


def _tally(counts: dict[str, int], row: dict[str, Any]) -> None:
    counts["rows"] += 1
    counts["error" if "error" in row else {True: "valid", False: "invalid", None: "unknown"}[row["overall_valid"]]] += 1
    if row.get("judge_skipped") and "error" not in row:  # (--flat rows do not say: they count as judged)
        counts["judge_skipped"] += 1


async def _check_file(path: Path, out: Any, cfg: ReflectionConfig, concurrency: int, flat: bool) -> dict[str, int]:
    counts = _new_counts()
    async for row in reflect_dataset(path, config=cfg, concurrency=concurrency, flat=flat):
        _tally(counts, row)
        try:
            out.write(dumps(row) + "\n")
        except BrokenPipeError:
            if stdout_closed():  # the judged rows still in flight are torn down next
                drop_unawaited_quietly()
            raise
    return counts
