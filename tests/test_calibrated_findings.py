"""Can a calibrated pass threshold show a finding? Hand-made shares with known answers; fit_threshold."""

import pandas as pd
import pytest

import helpers
from workbook.calibrated_findings import answer_shares, not_a_threshold_question, threshold_reading

JUDGE = {"judge": "local/qwen-1.5b", "metric": "rubric"}


def _finding(measure="pass", predicted="strict", **second_arm):
    return {"measure": measure, "predicted": predicted, "arms": {"strict": JUDGE, "loose": {**JUDGE, **second_arm}}}


def _shares(values: dict) -> pd.Series:
    return pd.Series(values).rename_axis(["arm", "case"])


def test_a_threshold_between_the_arms_shows_what_the_majority_does_not():
    # F6's shape: the predicted arm passes 8 of 15 samples, so a majority passes it too
    reading = threshold_reading(_finding(), _shares({("strict", "a"): 8 / 15, ("loose", "a"): 13 / 15}), {}, {})
    assert not reading["majority shows it"]
    assert reading["thresholds that show it"] == "(0.53, 0.87]"  # exactly the thresholds between the two shares
    assert reading["answer shares"] == "strict a 0.53; loose a 0.87"


def test_no_threshold_shows_a_finding_whose_predicted_arm_passed_more():
    # F3's shape: the over-demanding rubric passed 15 of 15, the fitting one 14 of 15
    reading = threshold_reading(_finding(), _shares({("strict", "a"): 1.0, ("loose", "a"): 14 / 15}), {}, {})
    assert reading["thresholds that show it"] == "none" and not reading["majority shows it"]


def test_correct_measure_counts_verdicts_that_match_the_truth_and_the_calibrated_threshold_is_applied():
    shares = _shares(
        {("strict", "right"): 0.9, ("strict", "wrong"): 0.8, ("loose", "right"): 0.9, ("loose", "wrong"): 0.2}
    )
    calibrated = {("local/qwen-1.5b", "rubric"): 0.85}
    reading = threshold_reading(_finding("correct"), shares, {"right": True, "wrong": False}, calibrated)
    # strict is right on both answers only when 0.8 < t <= 0.9; loose is right on both when 0.2 < t <= 0.9
    assert reading["majority shows it"]  # t just above 0.5: strict passes "wrong", loose does not
    assert reading["thresholds that show it"] == "(0.20, 0.80]"
    assert reading["calibrated threshold"] == 0.85 and not reading["calibrated shows it"]


def test_findings_one_threshold_cannot_speak_to_say_why():
    assert "different judges or metrics" in not_a_threshold_question(_finding(judge="local/qwen-0.5b"))
    assert "is not a verdict" in not_a_threshold_question(_finding("rubric_in_prompt"))
    assert not_a_threshold_question(_finding()) == ""


def test_answer_shares_count_unparsed_samples_as_no():
    table = pd.DataFrame({"arm": ["x"] * 4, "case": ["a"] * 4, "sample_verdict": ["pass", "pass", "fail", "unparsed"]})
    assert answer_shares(table).loc[("x", "a")] == 0.5


def test_sentences_and_summary_are_computed_from_the_readings():
    readings = pd.DataFrame(
        [
            {
                "finding": "F3",
                **threshold_reading(_finding(), _shares({("strict", "a"): 1.0, ("loose", "a"): 0.9}), {}, {}),
            },
            {
                "finding": "F6",
                **threshold_reading(_finding(), _shares({("strict", "a"): 0.6, ("loose", "a"): 0.9}), {}, {}),
            },
            {"finding": "F2", "not applicable": "its measure (rubric in prompt) is not a verdict"},
        ]
    ).set_index("finding")
    text = helpers.threshold_sentences(readings, labels=40)
    assert "**F3** (strict a 1.00; loose a 0.90): no threshold shows it" in text
    assert "thresholds in (0.60, 0.90] would" in text and "no labels score local/qwen-1.5b's rubric metric" in text
    assert "**F2**: not a question for one threshold" in text
    assert helpers.threshold_summary(readings) == "only another threshold would show F6; no threshold shows F3."


def test_fit_threshold_picks_the_lowest_best_threshold_on_every_label():
    scores = pd.Series([0.0, 0.2, 0.6, 0.8, 1.0])
    labels = pd.Series([0, 0, 0, 1, 1])
    assert helpers.fit_threshold(scores, labels) == pytest.approx(0.8)  # separates them perfectly
    assert helpers.fit_threshold(scores, pd.Series([0, 1, 0, 1, None])) == pytest.approx(0.2)  # NaN labels dropped
