"""Shipped data files: judge prompt templates and example data.

In a wheel they live in `reflection/_data/` (package data); in a source checkout or an
editable install they are read from the repository's top-level `prompts/` and `examples/`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(kind: str) -> Path:
    """Directory of shipped `prompts` or `examples`."""
    packaged = _PACKAGE / "_data" / kind
    if packaged.is_dir():
        return packaged
    checkout = _PACKAGE.parent / kind
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"shipped {kind!r} directory not found (looked in {packaged} and {checkout})")


def example_path(name: str) -> Path:
    """Path of a shipped example file, e.g. `example_path("calls.jsonl")`."""
    return data_dir("examples") / name


@dataclass(frozen=True)
class Template:
    """A prompt template: its text and the version from its `version: N` header."""

    name: str
    version: str
    text: str


def load_template(name: str, override_dir: Path | str | None = None) -> Template:
    """Load `name` (e.g. `general_hallucination_check`, `scoring/response_correctness`).

    A file `<name>.md` in `override_dir` replaces the shipped one.
    """
    if override_dir is not None:
        candidate = Path(override_dir) / f"{name}.md"
        if candidate.is_file():
            return _parse(name, candidate.read_text(encoding="utf-8"), f"user:{candidate}")
    return _shipped(name)


@functools.lru_cache(maxsize=64)
def _shipped(name: str) -> Template:
    path = data_dir("prompts") / f"{name}.md"
    if not path.is_file():
        raise FileNotFoundError(f"no prompt template named {name!r} at {path}")
    return _parse(name, path.read_text(encoding="utf-8"), "shipped")


def _parse(name: str, raw: str, origin: str) -> Template:
    header, sep, body = raw.partition("\n---\n")
    version = ""
    if sep:
        for line in header.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "version":
                version = value.strip()
    else:
        body = raw
    if not version:
        raise ValueError(f"prompt template {name!r} ({origin}) needs a 'version: N' header line followed by '---'")
    return Template(name=name, version=version, text=body.strip())
