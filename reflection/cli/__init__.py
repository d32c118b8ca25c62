"""The `reflection` command (`reflection = "reflection.cli:app"`). Holds no logic: each command
parses its options and calls the library.

One module per command: `check`, `batch` (`batch` and `report`), `score`, `calibrate`, `serve`
(`serve` and `mcp-proxy`); `common` holds what they share (user errors, exit statuses, the
guards around input and output files). Every command reads its configuration through
`reflection.config`, and imports the heavy parts of its work only when it runs, so
`reflection check --static-only` starts without the judge, the cache, scoring or the service.
`python -m reflection.cli` runs it too.
"""

from __future__ import annotations

import typer

from reflection.cli.batch import batch, report
from reflection.cli.calibrate import calibrate_command
from reflection.cli.check import check
from reflection.cli.score import score
from reflection.cli.serve import mcp_proxy, serve

__all__ = ["app"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Check LLM agents' tool calls before they execute, and score them against references.",
)


def _print_version(value: bool) -> None:
    if value:
        from reflection import __version__

        typer.echo(f"reflection {__version__} (toolcall-reflection)")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the version (and the package's name on the package index) and exit.",
    ),
) -> None:
    """Check LLM agents' tool calls before they execute, and score them against references."""


app.command()(check)
app.command("score", help="Score predicted tool calls against references (JSON Lines joined by id).")(score)
app.command("batch", help="Reflect a dataset with resume, judge cache, progress and a report.")(batch)
app.command("report", help="Summarise a batch output file (text table or --json).")(report)
app.command("serve", help="Run the reflection service and the OpenAI-compatible gateway (HTTP).")(serve)
# Options end at the server's command (no `--` needed), so clients that split their own
# command lines at `--` (the MCP Inspector) can still pass the server's options through.
app.command(
    "mcp-proxy",
    context_settings={"allow_interspersed_args": False},
    help="Check the tool calls of an MCP server (stdio or streamable HTTP): reflection mcp-proxy -- COMMAND ARGS...",
)(mcp_proxy)
app.command("calibrate", help="Calibrate thresholds on labelled calls: confusion matrices, sweeps, suggestions.")(
    calibrate_command
)
