"""Progress: a rich bar on a terminal, plain lines elsewhere; both count rows, tokens, cost and errors."""

import io

from rich.console import Console

from reflection.batch.progress import PlainProgress, RichProgress, make_progress

ROW = {"id": "a", "overall_valid": True, "usage": {"prompt_tokens": 100, "completion_tokens": 20, "cost_usd": 0.25}}
ERROR_ROW = {"id": "b", "overall_valid": None, "error": "row b: no call"}


def console(terminal):
    return Console(file=io.StringIO(), force_terminal=terminal, width=160)


def test_a_terminal_gets_the_rich_bar_and_a_pipe_gets_plain_lines():
    assert isinstance(make_progress(console(True)), RichProgress)
    assert isinstance(make_progress(console(False)), PlainProgress)


def test_plain_lines_show_rows_rate_eta_tokens_cost_and_errors():
    out = console(False)
    progress = PlainProgress(out, every=0)
    progress.start(total=4, skipped=2)
    progress.row(ROW)
    progress.row(ERROR_ROW)
    progress.finish()
    lines = out.file.getvalue().splitlines()
    assert lines[0] == "batch: 4 rows to reflect; 2 already in the output, skipped"
    assert lines[-1].startswith("batch: 2/4 rows, ")
    assert "rows/s, ETA " in lines[-1]
    assert lines[-1].endswith("120 judge tokens, $0.2500, 1 errors")


def test_the_rich_bar_ends_with_the_final_counts():
    out = console(True)
    progress = RichProgress(out)
    progress.start(total=None, skipped=0)
    for _ in range(3):
        progress.row(ROW)
    progress.row(ERROR_ROW)
    progress.finish()
    text = out.file.getvalue()
    assert "4/4" in text
    assert "360 tok  $0.7500  1 errors" in text
