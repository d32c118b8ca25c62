"""The `reflection calibrate` command: options in, `reflection.calibrate` calls out.

`reflection.cli` registers it; it imports the calibration code (and its models, sqlite3 and
the judge) only when it runs, so other commands start without them.
"""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["calibrate_command"]


def calibrate_command(
    labeled: Path = typer.Argument(
        ...,
        exists=True,
        dir_okay=False,
        help="Labelled rows (JSON Lines): {id, tools, history, call, label: {valid, checks}}.",
    ),
    output: Path = typer.Option(..., "-o", "--output", help="Write the JSON report here."),
    config: Path | None = typer.Option(
        None, "--config", exists=True, dir_okay=False, help="YAML config (see config.example.yaml)."
    ),
    base_url: str | None = typer.Option(
        None, "--base-url", help="Judge endpoint (OpenAI-compatible); overrides the config."
    ),
    model: str | None = typer.Option(None, "--model", help="Judge model name; overrides the config."),
    max_false_block: float | None = typer.Option(
        None,
        "--max-false-block",
        min=0.0,
        max=1.0,
        help="Suggest thresholds that block at most this share of valid calls (default: best F1).",
    ),
    plots: Path | None = typer.Option(
        None, "--plots", file_okay=False, help="Write one PNG per check here (needs the plots extra)."
    ),
    snippet: Path | None = typer.Option(
        None, "--snippet", dir_okay=False, help="Also write the suggested config snippet (YAML) here."
    ),
    concurrency: int = typer.Option(16, "--concurrency", min=1, help="Judge requests at once."),
    cache_path: Path | None = typer.Option(
        None,
        "--cache-path",
        dir_okay=False,
        help="Judge cache (SQLite). Default: .reflection-cache.sqlite next to OUTPUT.",
    ),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the judge cache."),
) -> None:
    """Reflect labelled calls and report, for overall_valid and each labelled check, the
    confusion matrix, precision, recall and false-block rate, a sweep over thresholds and
    confidence cut-offs, and suggested thresholds (printed as a config snippet)."""
    import json
    import sqlite3

    import anyio
    from rich.console import Console

    from reflection._log import warnings_to_stderr
    from reflection._text import terminal_safe
    from reflection.batch.runner import default_cache_path
    from reflection.calibrate import (
        LabelError,
        Observation,
        calibrate,
        observe,
        print_table,
        read_labeled,
        write_plots,
        write_text,
    )
    from reflection.cli.common import (
        CLOSED_STDOUT,
        ClosedStdout,
        raise_broken_pipe,
        refuse_input_as_output,
    )
    from reflection.config import load_config
    from reflection.errors import JudgeFatalError

    def fail(message: str) -> typer.Exit:
        # Not common.fail: a LabelError lists one unusable row per line.
        typer.echo(f"error: {terminal_safe(message)}", err=True)
        return typer.Exit(2)

    warnings_to_stderr()  # judge warnings can quote a server: one plain line each, as in every command
    try:
        refuse_input_as_output(output, labeled)
        refuse_input_as_output(snippet, labeled, option="--snippet")
    except ValueError as exc:
        raise fail(str(exc)) from None
    for path in (output, snippet):
        if path is not None and path.is_dir():
            raise fail(f"{path} is a directory; give a file name")
    try:
        cfg = load_config(config, base_url=base_url, model=model)
    except ValueError as exc:  # ConfigError: its message says what is wrong and where
        raise fail(str(exc)) from None
    if plots is not None:
        try:
            import matplotlib  # noqa: F401 - fail before reflecting anything, not after
        except ImportError:
            raise fail("--plots needs matplotlib: pip install 'toolcall-reflection[plots]'") from None
    try:
        rows = read_labeled(labeled)
    except (LabelError, FileNotFoundError, OSError) as exc:
        raise fail(str(exc)) from None
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    if cfg.judge is None:
        err.print(
            "judge skipped: no judge configured (use --config, REFLECTION_JUDGE__*, or --base-url/--model); "
            "only the static checks are calibrated",
            markup=False,
        )
    cache_file = None if no_cache or cfg.judge is None else (cache_path or default_cache_path(output))

    async def run() -> tuple[list[Observation], int]:
        from reflection.judge.cache import SQLiteJudgeCache

        if cache_file is None:
            return await observe(rows, config=cfg, concurrency=concurrency), 0
        async with SQLiteJudgeCache(cache_file) as cache:
            return await observe(rows, config=cfg, cache=cache, concurrency=concurrency), cache.hits

    try:
        observations, hits = anyio.run(run)
    except (sqlite3.DatabaseError, OSError, JudgeFatalError) as exc:  # fatal: the endpoint answers no request
        raise fail(str(exc)) from None
    report = calibrate(observations, cfg, max_false_block=max_false_block)
    try:
        write_text(output, json.dumps(report.to_json(), indent=2) + "\n")
    except OSError as exc:
        raise fail(f"cannot write the report: {exc}") from None
    notes = [f"reflected {len(rows)} labelled rows"]
    if cfg.judge is not None:
        notes.append(
            f"{report.judge_requests} judge requests"
            + (f", {hits} cache hits ({cache_file})" if cache_file else ", cache off")
        )
    left_out = {k: v for k, v in report.excluded.items() if v}
    if left_out:
        notes.append("left out: " + ", ".join(f"{v} {k}" for k, v in left_out.items()))
    err.print("; ".join(notes), markup=False)
    for obs in observations:
        if obs.error is not None:
            err.print(terminal_safe(f"row {obs.row.id}: {obs.error}"), markup=False)
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(width=120, highlight=False)
    raise_broken_pipe(console)
    text = report.snippet()
    pipe = ClosedStdout()  # `| head` ends the printing only: the snippet and plots are still written
    with pipe:
        print_table(report, console)
        console.print(text, markup=False, end="")
    written = [str(output)] + ([str(snippet)] if snippet else [])
    try:
        if snippet is not None:
            write_text(snippet, text)
        if plots is not None:
            written += [str(p) for p in write_plots(report, plots)]
    except OSError as exc:
        raise fail(f"the report is in {output}, but {exc}") from None
    err.print("wrote " + ", ".join(written), markup=False)
    if pipe.closed:
        raise typer.Exit(CLOSED_STDOUT)
