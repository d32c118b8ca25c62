"""The gate's own words: feedback the gate wrote, recognised when it comes back in a conversation.

Feedback quotes the refused values (`$.city (value "Tokyo" not found in the conversation)`).
Sent back to the model as the tool's result, or appended by a user as a message, it would
otherwise ground the very value it refused on the next round, and the judge would read it as
conversation. Every conversation is read through `strip_own_words`, which recognises the
gate's text in two independent ways, so neither a hook nor a user has to be trusted to label it:

- by structure: a feedback block starts with a line holding one of `FEEDBACK_HEADERS` (or a
  hook's note, `NOTE_MARKER`); that line and
  the block's own lines after it (bullets, indented lines, the suggested call) are removed,
  wherever the block sits in a message and whatever the caller wrapped around it;
- by memory: every line of every text the gate wrote in this process is remembered as a
  fingerprint (a bounded set, least recently used forgotten first); a line equal to one of
  them is removed wherever it appears (a caller that dropped or reworded the header line).

What remains of such a message is kept, followed by `REFUSAL_LABEL`, so the judge still sees
that a call was refused there, labelled as such, never the refusal's words as evidence.
"""

from __future__ import annotations

import re
import threading

from reflection._lru import LRU

__all__ = ["FEEDBACK_HEADERS", "NOTE_MARKER", "REFUSAL_LABEL", "remember", "strip_own_words"]

FEEDBACK_HEADERS = {
    "reflect": "was not run. Fix these problems and propose the call again",
    "deny": "was refused and will not run. These are the problems",
    "escalate": "is waiting for a person's approval. These are the problems",
}
"""Per blocking action, the phrase on the first line of the feedback the gate writes for it."""
NOTE_MARKER = "Note from reflection:"
"""How a note the hooks add to a tool's result (an applied correction) starts."""
# One search in C per message: most messages hold none of them, and every conversation is read.
_MARKERS = re.compile("|".join(re.escape(marker) for marker in (*FEEDBACK_HEADERS.values(), NOTE_MARKER)))

REFUSAL_LABEL = "[reflection refused an earlier tool call here; its feedback is omitted]"
"""What replaces the gate's words in a conversation."""

# Lines of a feedback block after its header: bullets, their indented details, the suggestion.
_BLOCK_LINE_STARTS = ("- ", "  ", "Suggested call", "(")
# Shorter lines are too generic to remove on memory alone ("- city" could be the user's own).
_MIN_REMEMBERED = 16
_REMEMBERED_LINES = 16_384

_lines = LRU(_REMEMBERED_LINES, static_stage=False)
_lock = threading.Lock()


def _fingerprint(line: str) -> str:
    return " ".join(line.split())


def remember(text: str | None) -> None:
    """Remember the lines of a text the gate wrote (feedback, a note), to recognise them later."""
    if not text:
        return
    with _lock:
        for line in text.splitlines():
            key = _fingerprint(line)
            if len(key) >= _MIN_REMEMBERED:
                _lines.put(key, True)


def strip_own_words(text: str) -> str | None:
    """`text` without the gate's own words, labelled; None when it holds none (the usual case,
    one substring test and, once the gate has written something, one look-up per line)."""
    if not _marked(text) and not (_lines.data and _has_remembered(text)):
        return None
    kept: list[str] = []
    removed = False
    in_block = False
    for line in text.splitlines():
        if _marked(line):
            in_block = removed = True
            cut = "The call to" if "The call to" in line else NOTE_MARKER
            before = line.split(cut, 1)[0].rstrip() if cut in line else ""
            if before:  # what a caller wrote before the header on the same line ("Error: ")
                kept.append(before)
            continue
        if in_block and (line.startswith(_BLOCK_LINE_STARTS) or not line.strip()):
            continue
        in_block = False
        if _lines.data and _fingerprint(line) in _lines.data:
            removed = True
            continue
        kept.append(line)
    if not removed:
        return None
    while kept and not kept[-1].strip():
        kept.pop()
    kept.append(REFUSAL_LABEL)
    return "\n".join(kept)


def _marked(text: str) -> bool:
    # Every feedback header follows "The call to": two substring tests rule out most messages.
    return ("The call to" in text or NOTE_MARKER in text) and _MARKERS.search(text) is not None


def _has_remembered(text: str) -> bool:
    data = _lines.data
    return any(_fingerprint(line) in data for line in text.splitlines())
