"""Response metrics: exact match and ROUGE-L."""

import importlib.util

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reflection.scoring import exact_match, rouge_l


def test_exact_match_ignores_case_and_surrounding_whitespace():
    assert exact_match("  Paris\n", "paris") == 1.0


def test_exact_match_can_be_strict():
    assert exact_match("Paris ", "Paris", normalize=False) == 0.0


def test_exact_match_is_0_for_different_answers():
    assert exact_match("Paris", "Lyon") == 0.0


needs_rouge = pytest.mark.skipif(
    importlib.util.find_spec("rouge_score") is None, reason="needs the metrics extra (rouge-score)"
)


@needs_rouge
def test_rouge_l_matches_rouge_score_on_english_text():
    from rouge_score import rouge_scorer

    reference, prediction = "the cat was found under the bed", "the cat was under the bed"
    expected = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(reference, prediction)["rougeL"].fmeasure
    assert rouge_l(prediction, reference) == pytest.approx(expected)


@needs_rouge
def test_rouge_l_worked_example():
    # LCS "the cat on the mat" = 5 tokens; P = 5/6, R = 5/6 -> F = 5/6.
    assert rouge_l("the cat sat on the mat", "the cat lay on the mat") == pytest.approx(5 / 6)


@needs_rouge
def test_rouge_l_does_not_drop_non_ascii_words():
    # rouge-score's default tokenizer keeps only [a-z0-9], so these would score 0 there.
    assert rouge_l("東京は日本の首都です", "東京は日本の首都") == pytest.approx(2 * 8 / (10 + 8))
    assert rouge_l("Müller fährt nach Köln", "Müller fährt nach Bonn") == pytest.approx(0.75)


@needs_rouge
def test_rouge_l_of_two_empty_answers_is_1():
    assert rouge_l("", "") == 1.0
    assert rouge_l("...", "") == 0.0


text = st.text(alphabet=st.sampled_from(list("abc xyz.,éü東京")), max_size=30)


@needs_rouge
@settings(max_examples=100, deadline=None)
@given(prediction=text, reference=text)
def test_response_scores_are_in_0_1(prediction, reference):
    assert 0.0 <= rouge_l(prediction, reference) <= 1.0
    assert exact_match(prediction, reference) in (0.0, 1.0)


@needs_rouge
@settings(max_examples=100, deadline=None)
@given(answer=text)
def test_identical_answers_score_1(answer):
    assert rouge_l(answer, answer) == pytest.approx(1.0)
    assert exact_match(answer, answer) == 1.0
