"""Call-level metrics: one predicted call against one expected call.

Both sides accept any shape `reflection.formats.normalize_calls` reads (OpenAI, Anthropic,
plain `{name, arguments}`; arguments as a JSON string or an object), a JSON string of one,
or a `ToolCall` (foreign shapes are read only through `reflection.formats`). Key order never
matters. A prediction that is not exactly one readable call scores 0 on `tool_call_equivalence`
and `binary_tool_call`; `staged_tool_call` gives it 0.25 when it is valid JSON (0 for no call).
A reference that is not one readable call is a dataset bug and raises ValueError.
"""

from __future__ import annotations

from typing import Any

from reflection._json import has_non_finite, parse_json
from reflection.formats import answers_in_text, normalize_calls, normalize_tools
from reflection.model import ToolCall
from reflection.scoring._values import json_equal, json_identical, with_defaults

__all__ = ["binary_tool_call", "predicted_calls", "staged_tool_call", "tool_call_equivalence"]


def tool_call_equivalence(prediction: Any, reference: Any, tools: Any = None) -> float:
    """1.0 when the two calls are equivalent, else 0.0.

    Equivalent means the same function and equal arguments, where a parameter that is not
    set counts as its schema `default` (on both sides, from `tools` in any format
    `normalize_tools` reads) and numbers compare by value (1 == 1.0; true is not 1).
    """
    expected = reference_call(reference)
    call = prediction_call(prediction)
    if call.error is not None or call.arguments is None or call.name != expected.name:
        return 0.0
    schema = None
    if tools is not None:
        spec = normalize_tools(tools).get(expected.name)
        schema = spec.parameters if spec is not None else None
    assert expected.arguments is not None  # reference_call guarantees it
    same = json_equal(with_defaults(call.arguments, schema), with_defaults(expected.arguments, schema))
    return 1.0 if same else 0.0


def binary_tool_call(prediction: Any, reference: Any) -> float:
    """1.0 when the function name and the argument dictionary are exactly equal, else 0.0.

    No schema defaults, and exact JSON types: 1 and 1.0 differ, as do true and 1.
    """
    expected = reference_call(reference)
    call = prediction_call(prediction)
    if call.error is not None or call.arguments is None:
        return 0.0
    return 1.0 if call.name == expected.name and json_identical(call.arguments, expected.arguments) else 0.0


def staged_tool_call(prediction: Any, reference: Any) -> float:
    """Partial credit by stage, each stage requiring the one before:

    0.0 no call (see `predicted_calls`) or a prediction that is not valid JSON (its arguments
    string included); 0.25 valid JSON, including several calls or anything that is not one
    readable call; 0.5 the right function; 0.75 the right set of parameter keys;
    1.0 an exact match (the `binary_tool_call` rule).
    """
    expected = reference_call(reference)
    if isinstance(prediction, str):
        try:
            prediction = parse_json(prediction)
        except ValueError:
            return 0.0
    if not isinstance(prediction, ToolCall) and has_non_finite(prediction):
        return 0.0
    calls = predicted_calls(prediction)
    if not calls:
        return 0.0
    if len(calls) != 1:
        return 0.25
    call = calls[0]
    if call.raw_arguments is not None and call.raw_arguments.strip():
        try:
            parse_json(call.raw_arguments)
        except ValueError:
            return 0.0
    if call.name != expected.name:
        return 0.25
    if call.arguments is None or call.arguments.keys() != expected.arguments.keys():  # type: ignore[union-attr]
        return 0.5
    return 1.0 if json_identical(call.arguments, expected.arguments) else 0.75


def read_calls(raw: Any) -> list[ToolCall]:
    """`normalize_calls`, also accepting a list of `ToolCall` objects; None and [] are no calls."""
    if raw is None or (isinstance(raw, (list, tuple)) and not raw):
        return []
    if isinstance(raw, (list, tuple)) and all(isinstance(item, ToolCall) for item in raw):
        return list(raw)
    return normalize_calls(raw)


def predicted_calls(raw: Any) -> list[ToolCall]:
    """The calls in a prediction, as `read_calls` reads them; no calls for None, [], "" and an
    assistant message that answered in text (no `tool_calls`, no `tool_use` block)."""
    if raw is None or raw == "":
        return []
    if answers_in_text(raw):
        return []
    return read_calls(raw)


def prediction_call(raw: Any) -> ToolCall:
    """The one call in a prediction, or a `ToolCall` whose `error` says why there is none."""
    calls = predicted_calls(raw)
    if not calls:
        return ToolCall(name="", error="no tool call was made")
    if len(calls) != 1:
        return ToolCall(name="", error=f"expected one tool call, got {len(calls)}")
    return calls[0]


def reference_call(raw: Any) -> ToolCall:
    """The one call in a reference; ValueError when the reference is not one readable call."""
    call = prediction_call(raw)
    if call.error is not None or call.arguments is None:
        raise ValueError(f"reference is not one readable tool call: {call.error}")
    return call
