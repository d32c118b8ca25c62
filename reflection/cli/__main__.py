"""`python -m reflection.cli ...`: the `reflection` command."""

from reflection.cli import app

app()
