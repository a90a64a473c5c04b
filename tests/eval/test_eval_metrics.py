"""The benchmarks' answer metrics on hand-made cases (RULER string match, BABILong)."""

import pytest

from titans_atlas.eval.metrics import (
    BABILONG_LABELS,
    babilong_compare_answers,
    babilong_labels,
    babilong_preprocess_output,
    ruler_string_match_all,
)

LOCATIONS = BABILONG_LABELS["qa1"]


def test_ruler_perfect_answer_scores_one_and_wrong_scores_zero():
    assert ruler_string_match_all(" 1234567.", ["1234567"]) == 1.0
    assert ruler_string_match_all(" 7654321.", ["1234567"]) == 0.0
    assert ruler_string_match_all("", ["1234567"]) == 0.0


def test_ruler_is_case_insensitive_and_counts_each_reference():
    assert ruler_string_match_all("The Key Is Wooden-Spoon", ["wooden-spoon"]) == 1.0
    assert ruler_string_match_all("only 111 here", ["111", "222"]) == 0.5
    assert ruler_string_match_all("\x00 42\x01", ["42"]) == 1.0  # control chars -> newline


def test_ruler_needs_references():
    with pytest.raises(ValueError, match="references"):
        ruler_string_match_all("x", [])


def test_babilong_perfect_answer_is_correct_and_wrong_is_not():
    q = "Where is Mary?"
    assert babilong_compare_answers(
        "kitchen", "The most recent location of Mary is kitchen.", q, LOCATIONS
    )
    assert babilong_compare_answers("kitchen", "KITCHEN", q, LOCATIONS)
    assert not babilong_compare_answers("kitchen", "office", q, LOCATIONS)
    assert not babilong_compare_answers("kitchen", "I do not know", q, LOCATIONS)


def test_babilong_two_labels_are_wrong_even_if_one_is_the_target():
    assert not babilong_compare_answers("kitchen", "kitchen or office", "Where is Mary?", LOCATIONS)


def test_babilong_label_in_the_question_is_not_counted():
    question = "Where was the apple before the kitchen?"
    # the target alone beside the question's label: correct
    assert babilong_compare_answers("bathroom", "bathroom, not kitchen", question, LOCATIONS)
    # answering the label named in the question never counts
    assert not babilong_compare_answers("bathroom", "kitchen", question, LOCATIONS)
    # a target that is in the question can never be scored correct
    assert not babilong_compare_answers("kitchen", "kitchen", question, LOCATIONS)


def test_babilong_keeps_only_the_first_sentence_and_cuts_examples():
    q = "Where is Mary?"
    assert not babilong_compare_answers("kitchen", "office. kitchen", q, LOCATIONS)
    assert not babilong_compare_answers("kitchen", "<example> kitchen", q, LOCATIONS)
    assert not babilong_compare_answers("kitchen", "x <context> kitchen", q, LOCATIONS)


def test_babilong_question_cut_is_the_benchmarks_no_op():
    # BABILong lower-cases before cutting at "Question", so that cut never fires
    assert babilong_preprocess_output("hallway Question: office") == "hallway question: office"
    assert not babilong_compare_answers("hallway", "hallway Question: office", "Where?", LOCATIONS)


def test_babilong_qa5_labels_match_case_insensitively():
    question = "Who gave the football to Jeff?"
    labels = babilong_labels("qa5")
    assert babilong_compare_answers("Fred", "fred", question, labels)
    assert babilong_compare_answers(
        "Fred", "Fred gave it to Jeff", question, labels
    )  # Jeff in question
    assert not babilong_compare_answers("Fred", "Bill", question, labels)


def test_babilong_labels_exist_for_qa1_to_qa5_only():
    assert babilong_labels("qa4") == LOCATIONS
    with pytest.raises(ValueError, match="qa6"):
        babilong_labels("qa6")
