"""Every public exception of reflection, in one tree with `ReflectionError` at its root.

`except ReflectionError` catches anything reflection raises on purpose. Each class keeps the
built-in base it always had beside it (a `ConfigError` is still a `ValueError`, an
`OutputLocked` still a `RuntimeError`), so older `except ValueError:` code keeps working, and
each is still importable from the module that raises it (`reflection.config.ConfigError`,
`reflection.judge.JudgeError`, ...); the most common ones also from `reflection`.

    ReflectionError
    ├── ConfigError (ValueError)            a configuration that cannot be used
    ├── JudgeError                          the judge gave no valid answer for a request
    ├── JudgeFatalError                     the judge endpoint cannot answer any request
    ├── JudgeRequestError                   one judge request failed (the cause of a JudgeError)
    │   ├── JudgeTimeout                    ... it ran past `judge.timeout`
    │   ├── JudgeConnectionError            ... the endpoint could not be reached
    │   └── JudgeStatusError                ... the endpoint answered an HTTP error status
    ├── InvalidReply                        a judge reply not JSON or not valid (re-asked)
    ├── UnreadableReply (ValueError)        no JSON object can be read from a judge reply
    ├── JSONTooDeep (ValueError)            JSON nesting deeper than the parsers go
    ├── RowError (ValueError)               an input row that cannot be reflected
    ├── LabelError (ValueError)             a labelled file that cannot be calibrated on
    ├── NotAResultRow (ValueError)          a row of something other than reflection results
    ├── OutputCorrupt (ValueError)          an output file with a line that is not a result row
    ├── OutputLocked (RuntimeError)         another process is writing the output file
    ├── RowProblem (ValueError)             a prediction/reference pair that cannot be scored
    ├── EscalationRequired                  the gate asks a person to approve a call (*)
    ├── StreamTooLarge (ValueError)         an upstream's event stream went past a bound
    ├── UnreadableMessage                   an MCP line that is not a JSON-RPC message
    └── Refused                             an upstream answer the gateway cannot pass on

This is the base layer: it imports nothing from a higher one (only `_text`, beside it,
when a `NotAResultRow` words its message), so every module can import it. (*) For that reason
`EscalationRequired` is defined in `reflection.integrations`: its message is the approval text
written there, from a gate's `Decision`. `JudgeError.usage` is a `reflection.model.JudgeUsage`
when the judge raises it, and None when an error is made without one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "ConfigError",
    "InvalidReply",
    "JSONTooDeep",
    "JudgeConnectionError",
    "JudgeError",
    "JudgeFatalError",
    "JudgeRequestError",
    "JudgeStatusError",
    "JudgeTimeout",
    "LabelError",
    "NotAResultRow",
    "OutputCorrupt",
    "OutputLocked",
    "ReflectionError",
    "Refused",
    "RowError",
    "RowProblem",
    "StreamTooLarge",
    "UnreadableMessage",
    "UnreadableReply",
]


class ReflectionError(Exception):
    """The root of every exception reflection raises on purpose."""


# --- configuration ------------------------------------------------------------------------------


class ConfigError(ReflectionError, ValueError):
    """A configuration that cannot be used: unreadable or malformed YAML, an unknown key, a bad value.
    The message is one line a person can act on."""


# --- the judge ----------------------------------------------------------------------------------


class JudgeError(ReflectionError):
    """The judge could not give a valid answer within the allowed attempts."""

    def __init__(self, reason: str, usage: Any = None):
        super().__init__(reason)
        self.reason = reason
        self.usage = usage
        """What the failed requests cost (a `reflection.model.JudgeUsage`; None if not given)."""


class JudgeFatalError(ReflectionError):
    """The judge endpoint cannot answer any request: HTTP 401 (bad key), 403 (no permission),
    404 (unknown model or wrong path), or a refused connection. Not a problem of one row, so
    it is never turned into an error row: `reflection check`, `batch` and `score` stop on it.
    `str()` is one line: `judge <url>: HTTP <status>: <server message>`."""

    def __init__(self, url: str, problem: str, *, status: int | None = None, server_message: str = ""):
        super().__init__(f"judge {url}: {problem}")
        self.url = url
        self.status = status
        self.server_message = server_message


class JudgeRequestError(ReflectionError):
    """One request to the judge endpoint failed. The judge retries the retryable ones (a timeout,
    a broken connection, HTTP 408, 429 and 5xx); the last one is the `__cause__` of the
    `JudgeError` it raises. `str()` is the reason that `JudgeError` gives."""

    retryable = True


class JudgeTimeout(JudgeRequestError):
    """The request ran past `judge.timeout` (the deadline of the whole exchange)."""

    def __init__(self) -> None:
        super().__init__("the judge request timed out")


class JudgeConnectionError(JudgeRequestError):
    """The endpoint could not be reached, or the connection broke (a refused connection is a
    `JudgeFatalError` instead). `detail` is the transport's own description."""

    def __init__(self, detail: str = ""):
        super().__init__("could not connect to the judge endpoint")
        self.detail = detail


class JudgeStatusError(JudgeRequestError):
    """The endpoint answered with an HTTP error status. `body` is the error it sent (the `error`
    member of an OpenAI-style body, else the body), `retry_after` its Retry-After header, and
    `message` what the server said about it, as one bounded printable line."""

    def __init__(self, status: int, body: Any, message: str, retry_after: str | None = None):
        super().__init__(f"HTTP {status} from the judge endpoint" + (f": {message}" if message else ""))
        self.status = status
        self.body = body
        self.message = message
        self.retry_after = retry_after
        self.retryable = status in (408, 429) or status >= 500


class InvalidReply(ReflectionError):
    """A reply that was not JSON or failed validation; the judge is re-asked with the error."""


class UnreadableReply(ReflectionError, ValueError):
    """The message holds no JSON object we can read with certainty."""


# --- reading input -----------------------------------------------------------------------------


class JSONTooDeep(ReflectionError, ValueError):
    """JSON text nesting deeper than the JSON parsers go (about a thousand levels)."""


class RowError(ReflectionError, ValueError):
    """A row that cannot be reflected; its message goes into the error row."""


class LabelError(ReflectionError, ValueError):
    """The labelled file cannot be used; the message lists every problem found (up to 20)."""


class NotAResultRow(ReflectionError, ValueError):
    """A row without `overall_valid`: the file is not a reflection output (a dataset, most often)."""

    def __init__(self, row: Mapping[str, Any], path: str | Path | None = None):
        from reflection._text import terminal_safe

        self.row = row
        looks = " (it has the members of an input row)" if _INPUT_MEMBERS & set(row) else ""
        where = f"{path} is not a reflection result file: its" if path is not None else "this is not a result row: the"
        super().__init__(
            f'{where} row {terminal_safe(str(row.get("id")), one_line=True)[:80]!r} has no "overall_valid"{looks}; '
            "report on the output of `reflection batch` or `reflection check`, e.g. "
            "`reflection batch DATASET -o results.jsonl` then `reflection report results.jsonl`"
        )


_INPUT_MEMBERS = {"call", "tool_calls", "tools", "history"}


# --- writing output ----------------------------------------------------------------------------


class OutputCorrupt(ReflectionError, ValueError):
    """The output file has a line that is not a result row: it was not written by `reflection batch` alone."""


class OutputLocked(ReflectionError, RuntimeError):
    """Another process is writing the output file."""


# --- scoring -----------------------------------------------------------------------------------


class RowProblem(ReflectionError, ValueError):
    """A row that cannot be scored; its message goes into the error row."""


# --- the service -------------------------------------------------------------------------------


class StreamTooLarge(ReflectionError, ValueError):
    """The upstream's stream went past a bound (one event, or the whole stream)."""


class UnreadableMessage(ReflectionError):
    """A line that is not a JSON-RPC message the SDK can read (not UTF-8, not JSON, nested too
    deeply, too long, not JSON-RPC). `id` and `method` are what could be recovered from it, so
    the proxy can answer the request it was, or the request it answered, with an error."""

    def __init__(self, reason: str, id: str | int | None = None, method: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.id = id
        self.method = method


class Refused(ReflectionError):
    """The upstream's answer cannot be passed on: `response` is what the client gets instead."""

    def __init__(self, response: Any):
        super().__init__()
        self.response = response
