"""Trajectory correctness: modes, name normalisation, OpenAI trajectories, reasons, properties."""

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reflection.scoring import (
    atrajectory_correctness,
    normalize_tool_name,
    trajectory_correctness,
    trajectory_from_messages,
)
from reflection.scoring._assignment import max_weight_assignment

ARGS = ("input_parameters",)


def call(name, output=None, **args):
    step = {"name": name, "args": args}
    if output is not None:
        step["output"] = output
    return step


# --- name normalisation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "normalized"),
    [
        ("delegate_to_sql_query_agent_xg7c", "delegate_to_sql_query_agent"),
        ("search_7f3a", "search"),
        ("get_data", "get_data"),
        ("user_name", "user_name"),
        ("report_2024", "report_2024"),
        ("lookup_ab12c", "lookup_ab12c"),
        ("_ab12", "_ab12"),
    ],
)
def test_dynamic_suffixes_are_stripped_and_ordinary_words_kept(name, normalized):
    assert normalize_tool_name(name) == normalized


def test_dynamic_suffixes_do_not_cost_a_match():
    result = trajectory_correctness([call("delegate_to_sql_query_agent_xg7c")], [call("delegate_to_sql_query_agent")])
    assert result.score == 1.0


def test_a_kept_name_is_never_stripped():
    assert normalize_tool_name("resize_img2") == "resize"  # the base rule alone
    assert normalize_tool_name("resize_img2", keep={"resize_img2"}) == "resize_img2"


def test_an_expected_name_is_not_stripped_so_a_sibling_tool_does_not_match_it():
    assert trajectory_correctness([call("resize_img3")], [call("resize_img2")]).score == 0.0
    assert trajectory_correctness([call("resize_img2")], [call("resize_img2")]).score == 1.0


def test_two_expected_names_with_suffix_like_endings_stay_apart():
    expected = [call("resize_img2"), call("resize_img3")]
    assert trajectory_correctness([call("resize_img2"), call("resize_img2")], expected).score == 0.5
    assert trajectory_correctness([call("resize_img3"), call("resize_img2")], expected).score == 1.0


def test_a_declared_tool_is_not_stripped():
    tools = [
        {"name": "vex_api.upload_vex1", "parameters": {"type": "object", "properties": {}}},
        {"name": "vex_api.upload", "parameters": {"type": "object", "properties": {}}},
    ]
    called = [call("vex_api.upload_vex1")]
    assert trajectory_correctness(called, [call("vex_api.upload")]).score == 1.0  # no inventory: the base rule
    assert trajectory_correctness(called, [call("vex_api.upload")], tools=tools).score == 0.0


async def test_available_tools_count_as_declared():
    from reflection.judge import Judge
    from reflection.testing import FakeJudge

    tools = [{"name": "resize_img2", "parameters": {"type": "object", "properties": {}}}]
    with FakeJudge() as fake:
        async with Judge(fake.config) as judge:
            result = await atrajectory_correctness(
                [call("resize_img2")], [call("resize")], judge=judge, available_tools=tools, query="resize it"
            )
    assert (result.match_score, result.selection_score) == (0.0, 1.0)


def test_an_undeclared_dynamic_suffix_is_still_stripped_with_tools():
    tools = [{"name": "delegate_to_sql_query_agent", "parameters": {"type": "object", "properties": {}}}]
    result = trajectory_correctness(
        [call("delegate_to_sql_query_agent_xg7c")], [call("delegate_to_sql_query_agent")], tools=tools
    )
    assert result.score == 1.0


def test_name_normalisation_can_be_turned_off():
    result = trajectory_correctness([call("search_7f3a")], [call("search")], normalize_names=False)
    assert result.score == 0.0


# --- default mode: optimal assignment --------------------------------------------------------


def test_names_only_by_default():
    assert trajectory_correctness([call("search", q="a")], [call("search", q="b")]).score == 1.0


def test_argument_partial_credit_is_the_fraction_of_matching_keys():
    result = trajectory_correctness(
        [call("book", city="Paris", nights=2, guests=1)],
        [call("book", city="Paris", nights=3, guests=1)],
        evaluation_params=ARGS,
    )
    assert result.score == pytest.approx(2 / 3)


def test_argument_partial_credit_recurses_into_objects():
    called = [call("book", where={"city": "Paris", "zip": "75001"}, nights=2)]
    expected = [call("book", where={"city": "Paris", "zip": "75002"}, nights=2)]
    assert trajectory_correctness(called, expected, evaluation_params=ARGS).score == pytest.approx((0.5 + 1) / 2)


def test_calls_without_arguments_match_fully():
    assert trajectory_correctness([call("now")], [call("now")], evaluation_params=ARGS).score == 1.0


def test_duplicate_expected_calls_matched_by_duplicate_calls_score_1():
    # A greedy matcher that marks called tools by equality matches only the first duplicate.
    steps = [call("ping", host="a"), call("ping", host="a")]
    assert trajectory_correctness(steps, steps, evaluation_params=ARGS).score == 1.0


def test_one_call_cannot_satisfy_two_expected_duplicates():
    result = trajectory_correctness([call("ping", host="a")], [call("ping", host="a")] * 2, evaluation_params=ARGS)
    assert result.score == 0.5
    assert result.missing == (1,)


def test_assignment_beats_greedy_first_match():
    # Greedy pairs expected #0 with called #0 (0.5) and leaves #1 to nothing it fits; optimal pairs crosswise.
    expected = [call("f", a=1, b=2), call("f", a=1, b=9)]
    called = [call("f", a=1, b=9), call("f", a=1, b=2)]
    assert trajectory_correctness(called, expected, evaluation_params=ARGS).score == 1.0


def test_extra_calls_do_not_lower_the_default_score_but_are_named():
    result = trajectory_correctness([call("search"), call("delete_everything")], [call("search")])
    assert result.score == 1.0
    assert result.extra == (1,)
    assert "extra: #1 delete_everything" in result.reason


def test_output_is_compared_when_selected():
    called = [call("sql", output='{"rows": 3}')]
    assert trajectory_correctness(called, [call("sql", output={"rows": 3})], evaluation_params=("output",)).score == 1.0
    assert trajectory_correctness(called, [call("sql", output={"rows": 4})], evaluation_params=("output",)).score == 0.0


def test_nothing_expected_and_nothing_called_scores_1():
    assert trajectory_correctness([], []).score == 1.0


def test_nothing_expected_but_something_called_scores_0():
    assert trajectory_correctness([call("search")], []).score == 0.0


def test_schema_defaults_fill_unset_arguments_when_tools_are_given():
    tools = [
        {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "units": {"type": "string", "default": "celsius"}},
            },
        }
    ]
    called = [call("get_weather", city="Oslo")]
    expected = [call("get_weather", city="Oslo", units="celsius")]
    assert trajectory_correctness(called, expected, evaluation_params=ARGS, tools=tools).score == 1.0


# --- ordering and exact modes ----------------------------------------------------------------


def test_ordering_mode_scores_the_weighted_longest_common_subsequence():
    expected = [call("a"), call("b"), call("c")]
    called = [call("a"), call("c"), call("b")]
    result = trajectory_correctness(called, expected, should_consider_ordering=True)
    assert result.score == pytest.approx(2 / 3)
    assert len(result.out_of_order) == 1
    assert "out of order" in result.reason


def test_ordering_mode_weights_the_subsequence_by_argument_credit():
    expected = [call("a", x=1, y=1), call("b", x=1)]
    called = [call("a", x=1, y=2), call("b", x=1)]
    result = trajectory_correctness(called, expected, should_consider_ordering=True, evaluation_params=ARGS)
    assert result.score == pytest.approx((0.5 + 1) / 2)


def test_exact_mode_needs_the_same_calls_in_the_same_order():
    steps = [call("a", x=1), call("b")]
    assert trajectory_correctness(steps, steps, should_exact_match=True, evaluation_params=ARGS).score == 1.0
    assert trajectory_correctness(steps[::-1], steps, should_exact_match=True).score == 0.0
    assert trajectory_correctness(steps + [call("c")], steps, should_exact_match=True).score == 0.0
    changed = [call("a", x=2), call("b")]
    assert trajectory_correctness(changed, steps, should_exact_match=True, evaluation_params=ARGS).score == 0.0


# --- options ---------------------------------------------------------------------------------


def test_strict_mode_is_binary_with_threshold_1():
    result = trajectory_correctness([call("a")], [call("a"), call("b")], strict_mode=True)
    assert (result.score, result.threshold, result.success) == (0.0, 1.0, False)


def test_threshold_decides_success():
    called, expected = [call("a")], [call("a"), call("b")]
    assert trajectory_correctness(called, expected, threshold=0.5).success is True
    assert trajectory_correctness(called, expected, threshold=0.6).success is False


def test_reason_names_missing_calls_and_argument_differences():
    result = trajectory_correctness(
        [call("book", city="Lyon")], [call("book", city="Paris"), call("pay")], evaluation_params=ARGS
    )
    assert "missing: #1 pay" in result.reason
    assert '$.city: expected "Paris", got "Lyon"' in result.reason


def test_include_reason_false_gives_no_reason():
    assert trajectory_correctness([call("a")], [call("a")], include_reason=False).reason is None


def test_unknown_evaluation_param_is_rejected():
    with pytest.raises(ValueError, match="evaluation_params"):
        trajectory_correctness([], [], evaluation_params=("arguments",))


# --- OpenAI-format trajectories --------------------------------------------------------------

AGENT = [
    {"role": "user", "content": "How many orders shipped last week?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {
                    "name": "delegate_to_sql_query_agent_xg7c",
                    "arguments": '{"question": "orders shipped last week"}',
                },
            },
            {"id": "c2", "type": "function", "function": {"name": "get_calendar", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "c2", "content": "week 12"},
    {"role": "tool", "tool_call_id": "c1", "content": '{"count": 42}'},
    {"role": "assistant", "content": "42 orders."},
]


def test_tool_results_are_joined_to_calls_by_tool_call_id():
    steps = trajectory_from_messages(AGENT)
    assert [(s.name, s.output) for s in steps] == [
        ("delegate_to_sql_query_agent_xg7c", '{"count": 42}'),
        ("get_calendar", "week 12"),
    ]
    assert steps[0].args == {"question": "orders shipped last week"}


def test_an_agent_conversation_scores_against_expected_calls_with_outputs():
    expected = [call("delegate_to_sql_query_agent", output={"count": 42}, question="orders shipped last week")]
    result = trajectory_correctness(AGENT, expected, evaluation_params=("input_parameters", "output"))
    assert result.score == 1.0


# --- the assignment solver -------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda r: st.integers(1, 5).flatmap(
            lambda c: st.lists(
                st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 1 / 3]), min_size=c, max_size=c), min_size=r, max_size=r
            )
        )
    )
)
def test_assignment_is_optimal_against_brute_force(weights):
    rows, cols = len(weights), len(weights[0])
    pairs = max_weight_assignment(weights)
    assert len({r for r, _ in pairs}) == len({c for _, c in pairs}) == len(pairs) == min(rows, cols)
    if rows <= cols:
        best = max(sum(weights[r][p[r]] for r in range(rows)) for p in itertools.permutations(range(cols), rows))
    else:
        best = max(sum(weights[p[c]][c] for c in range(cols)) for p in itertools.permutations(range(rows), cols))
    assert sum(weights[r][c] for r, c in pairs) == pytest.approx(best)


# --- properties ------------------------------------------------------------------------------

values = st.one_of(
    st.integers(-3, 3),
    st.sampled_from(["a", "b"]),
    st.booleans(),
    st.dictionaries(st.sampled_from(["k", "m"]), st.integers(0, 2), max_size=2),
)
steps = st.lists(
    st.builds(
        lambda n, a: {"name": n, "args": a},
        st.sampled_from(["a", "b", "c_7f3a", "c"]),
        st.dictionaries(st.sampled_from(["x", "y", "z"]), values, max_size=3),
    ),
    max_size=5,
)
modes = st.sampled_from([{}, {"should_consider_ordering": True}, {"should_exact_match": True}])
params = st.sampled_from([(), ARGS])


@settings(max_examples=150, deadline=None)
@given(called=steps, expected=steps, mode=modes, evaluation_params=params, strict=st.booleans())
def test_every_trajectory_score_is_in_0_1(called, expected, mode, evaluation_params, strict):
    result = trajectory_correctness(called, expected, evaluation_params=evaluation_params, strict_mode=strict, **mode)
    assert 0.0 <= result.score <= 1.0


@settings(max_examples=150, deadline=None)
@given(trajectory=steps, mode=modes, evaluation_params=params)
def test_identical_trajectories_score_1(trajectory, mode, evaluation_params):
    assert trajectory_correctness(trajectory, trajectory, evaluation_params=evaluation_params, **mode).score == 1.0


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(called=steps, expected=steps, seed=st.integers(0, 2**16))
def test_default_mode_is_invariant_to_permutations(called, expected, seed):
    rng = random.Random(seed)
    base = trajectory_correctness(called, expected, evaluation_params=ARGS).score
    shuffled_called, shuffled_expected = called[:], expected[:]
    rng.shuffle(shuffled_called)
    rng.shuffle(shuffled_expected)
    assert trajectory_correctness(shuffled_called, shuffled_expected, evaluation_params=ARGS).score == pytest.approx(
        base, abs=1e-12
    )


@settings(max_examples=100, deadline=None)
@given(trajectory=steps, copies=st.integers(2, 3))
def test_duplicated_expected_calls_matched_by_duplicated_calls_score_1(trajectory, copies):
    repeated = [step for step in trajectory for _ in range(copies)]
    assert trajectory_correctness(repeated, repeated, evaluation_params=ARGS).score == 1.0
    assert trajectory_correctness(repeated[::-1], repeated, evaluation_params=ARGS).score == 1.0


def test_bare_tool_names_are_read_as_calls_without_arguments():
    assert trajectory_correctness(["WebSearch", "ToolQuery"], ["WebSearch"]).score == 1.0


def test_deepeval_style_calls_with_input_parameters_and_output_are_read():
    step = {"name": "sql", "input_parameters": {"q": "select 1"}, "output": [[1]]}
    result = trajectory_correctness([step], [step], evaluation_params=("input_parameters", "output"))
    assert result.score == 1.0
