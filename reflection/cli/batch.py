"""The `reflection batch` and `reflection report` commands: options in, library calls out.

`reflection.cli` registers them (`app.command("batch")(batch)`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import typer

from reflection._log import warnings_to_stderr
from reflection._text import terminal_safe
from reflection.batch._workers import default_workers
from reflection.cli.common import (
    CLOSED_STDOUT,
    FAIL_ON_HELP,
    ClosedStdout,
    fail_on_option,
    raise_broken_pipe,
    user_errors,
    verdict_exit,
)
from reflection.config import load_config

if TYPE_CHECKING:  # the commands import what they use when they run: `reflection check` stays light
    from rich.console import Console

    from reflection.batch.report import BatchReport
    from reflection.batch.runner import BatchStats

__all__ = ["WORKERS_HELP", "batch", "report"]

WORKERS_HELP = (
    "Processes reflecting rows when no judge is configured (default: the usable cores, at most 8; "
    "inputs under 1 MiB use one). With a judge, rows run in one process, concurrently."
)


def _console(*, stderr: bool = False) -> Console:
    """A terminal's own width; 120 columns for tables written to a file or pipe. Messages on
    stderr never wrap (soft wrap), so log lines stay whole."""
    from rich.console import Console

    options: dict[str, Any] = {"stderr": True, "soft_wrap": True, "highlight": False} if stderr else {}
    console = Console(**options)
    if not console.is_terminal:
        console = Console(width=120, **options)
    return console if stderr else raise_broken_pipe(console)


@user_errors
def batch(
    input: Path = typer.Argument(..., help="Dataset: .jsonl, .json (array), .csv (JSON columns) or .parquet."),
    output: Path = typer.Option(..., "-o", "--output", help="Result rows (JSON Lines); rerun to resume."),
    config: Path | None = typer.Option(
        None, "--config", exists=True, dir_okay=False, help="YAML config (see config.example.yaml)."
    ),
    base_url: str | None = typer.Option(
        None, "--base-url", help="Judge endpoint (OpenAI-compatible); overrides the config."
    ),
    model: str | None = typer.Option(None, "--model", help="Judge model name; overrides the config."),
    mode: str | None = typer.Option(None, "--mode", help="combined (one judge request per call) or per_check."),
    concurrency: int = typer.Option(
        16, "--concurrency", min=1, help="Judge requests at once (rows in flight: twice this)."
    ),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the judge cache."),
    cache_path: Path | None = typer.Option(
        None,
        "--cache-path",
        dir_okay=False,
        help="Judge cache (SQLite). Default: .reflection-cache.sqlite next to OUTPUT.",
    ),
    static_only: bool = typer.Option(False, "--static-only", help="Run only the static checks and grounding."),
    retry_unknown: bool = typer.Option(
        True,
        "--retry-unknown/--no-retry-unknown",
        help="Reflect again the rows of OUTPUT whose judge failed, replacing them.",
    ),
    json_report: bool = typer.Option(False, "--json-report", help="Print the final report as JSON."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress on stderr."),
    flat: bool = typer.Option(False, "--flat", help="Write only id, overall_valid, the flat keys and error per row."),
    workers: int | None = typer.Option(None, "--workers", min=1, help=WORKERS_HELP),
    fail_on: list[str] = typer.Option(
        [],
        "--fail-on",
        callback=fail_on_option,
        metavar="invalid|unknown|error",
        help=FAIL_ON_HELP + " Counts every row of OUTPUT, resumed ones too.",
    ),
) -> None:
    """Reflect every row of INPUT into OUTPUT, one result row per input row (any order), then print the report.

    Exit status: 0 done, 1 a --fail-on row, 2 user error, 3 the judge answered no row it was
    asked about, 130 interrupted (rerun to resume), 141 stdout closed (| head)."""
    from reflection.batch.progress import make_progress
    from reflection.batch.runner import default_cache_path, run_batch

    warnings_to_stderr()
    cfg = load_config(config, static_only=static_only, base_url=base_url, model=model, mode=mode)
    err = _console(stderr=True)
    if cfg.judge is None:
        reason = (
            "--static-only"
            if static_only
            else "no judge configured (use --config, REFLECTION_JUDGE__*, or --base-url/--model)"
        )
        err.print(f"judge skipped: {reason}; running static checks and grounding only", markup=False)
    cache_file = None if no_cache or cfg.judge is None else (cache_path or default_cache_path(output))
    try:
        stats: BatchStats = anyio.run(
            lambda: run_batch(
                input,
                output,
                config=cfg,
                concurrency=concurrency,
                cache=cache_file is not None,
                cache_path=cache_file,
                progress=make_progress(err, enabled=progress),
                retry_unknown=retry_unknown,
                flat=flat,
                workers=workers or default_workers(),
            )
        )
    except KeyboardInterrupt:
        err.print(
            f"interrupted: the rows written so far are in {terminal_safe(output)}; rerun the same command to resume",
            markup=False,
        )
        raise typer.Exit(130) from None
    notes = [f"wrote {stats.written:,} rows to {terminal_safe(output)} in {stats.seconds:,.1f} s"]
    if stats.skipped:
        notes.append(f"{stats.skipped:,} already there (skipped)")
    if stats.retried:
        notes.append(f"{stats.retried:,} whose judge had failed asked again (replaced)")
    if stats.duplicates:
        notes.append(f"{stats.duplicates:,} duplicate ids (error rows)")
    if stats.truncated_bytes:
        notes.append(f"cut a partial last line ({stats.truncated_bytes:,} bytes) left by an interrupted run")
    if cfg.judge is not None:
        notes.append(
            f"{stats.judge_requests:,} judge requests"
            + (f", {stats.cache_hits:,} cache hits ({terminal_safe(cache_file)})" if cache_file else ", cache off")
        )
    err.print("; ".join(notes), markup=False)
    pipe = ClosedStdout()
    summary = _read_report(output)
    with pipe:
        _print_report(summary, json_report)
    status = verdict_exit(summary.model_dump(), fail_on)
    if status or pipe.closed:
        raise typer.Exit(status or CLOSED_STDOUT)


@user_errors
def report(
    output: Path = typer.Argument(..., help="A batch output file (JSON Lines)."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    html_out: Path | None = typer.Option(
        None, "--html", dir_okay=False, help="Also write a self-contained HTML report (charts, failing rows) here."
    ),
) -> None:
    """Summarise a batch output file: verdict counts, mean of each flat key, top failing checks, judge cost, latency.

    A file that is not a reflection output (a dataset given by mistake) is refused (exit 2).
    A closed stdout (| head) stops the printing only: the HTML report is still written (exit 141)."""
    if not output.is_file():
        raise FileNotFoundError(2, "output file not found", str(output))
    if html_out is not None and not html_out.parent.is_dir():
        raise ValueError(f"cannot write the HTML report: no folder {str(html_out.parent)!r}")
    summary = _read_report(output)  # raises on an input file, before anything is printed
    pipe = ClosedStdout()
    with pipe:
        _print_report(summary, json_out)
    if html_out is not None:  # an OSError writing it is a user error like any other
        from reflection.batch._output import iter_output_rows
        from reflection.batch.html import batch_report_html, write_html

        write_html(html_out, batch_report_html(iter_output_rows(output), source=output))
        typer.echo(f"wrote the HTML report to {terminal_safe(html_out)}", err=True)
    if pipe.closed:
        raise typer.Exit(CLOSED_STDOUT)


def _read_report(output: Path) -> BatchReport:
    from reflection.batch.report import read_report

    return read_report(output)


def _print_report(summary: BatchReport, as_json: bool) -> None:
    from reflection.batch.report import render_report

    if as_json:
        typer.echo(summary.model_dump_json(indent=2))
    else:
        render_report(summary, _console())
