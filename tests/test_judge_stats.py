"""Design-aware judge statistics on small hand-made data with known answers."""

import numpy as np
import pandas as pd
import pytest

import helpers
from workbook.judge_stats import majority_agreement


def test_wilson_matches_the_textbook_interval():
    low, high = helpers.wilson(5, 10)  # Wilson 95% for 5/10: 0.5 -/+ 0.2634
    assert (low, high) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert all(np.isnan(helpers.wilson(0, 0)))


def test_exact_mcnemar_5_fixed_2_broke_gives_p_0_453():
    before = pd.Series([0] * 5 + [1] * 2 + [1] * 6 + [0] * 2)
    after = pd.Series([1] * 5 + [0] * 2 + [1] * 6 + [0] * 2)
    result = helpers.paired_mcnemar(before, after, ("v1", "v4"))
    assert (result["fixed"], result["broke"], result["cases"]) == (5, 2, 15)
    assert result["p_value"] == pytest.approx(58 / 128)  # 2 * P(X <= 2), X ~ Binomial(7, 1/2)
    assert not result["differs"] and "p = 0.45" in result["sentence"]


def test_mcnemar_with_no_discordant_pair_is_p_1_and_lopsided_is_small():
    same = pd.Series([1, 0, 1])
    assert helpers.paired_mcnemar(same, same)["p_value"] == 1.0
    lopsided = helpers.paired_mcnemar(pd.Series([0] * 10), pd.Series([1] * 10))
    assert lopsided["p_value"] == pytest.approx(2 / 2**10) and lopsided["differs"]


def test_cluster_bootstrap_is_wider_than_treating_samples_as_independent():
    # 10 answers, 9 samples each: 5 answers always pass, 5 always fail
    clusters = pd.Series(np.repeat(np.arange(10), 9))
    values = pd.Series(np.repeat([1, 0] * 5, 9))
    estimate, low, high = helpers.cluster_bootstrap(values, clusters)
    _, iid_low, iid_high = helpers.bootstrap_ci(values.to_numpy())
    assert estimate == pytest.approx(0.5)
    assert high - low > 1.5 * (iid_high - iid_low)  # 10 units, not 90
    assert low == pytest.approx(0.2, abs=0.11) and high == pytest.approx(0.8, abs=0.11)


def test_cluster_bootstrap_weights_answers_by_their_samples_and_degenerates_when_nothing_varies():
    estimate, _, _ = helpers.cluster_bootstrap(pd.Series([1, 1, 1, 0]), pd.Series(["a", "a", "a", "b"]))
    assert estimate == pytest.approx(0.75)
    assert helpers.cluster_bootstrap(pd.Series([1, 0, 1, 0]), pd.Series(["a", "a", "b", "b"])) == (0.5, 0.5, 0.5)


@pytest.mark.parametrize(
    "share, k, expected",
    [(0.8, 1, 0.8), (0.8, 2, 0.64), (0.8, 3, 0.896), (0.2, 1, 0.8), (0.2, 2, 0.96), (0.5, 1, 0.5), (1.0, 5, 1.0)],
)
def test_majority_agreement_is_binomial_with_ties_failing(share, k, expected):
    assert majority_agreement(share, k) == pytest.approx(expected)


def test_stability_curve_stops_at_the_recorded_samples_and_finds_k_for_95():
    samples = pd.DataFrame(
        {
            "judge": "j",
            "case": ["steady"] * 6 + ["shaky"] * 6,
            "passed": [1] * 6 + [1, 1, 1, 1, 1, 0],  # shaky: share 5/6
        }
    )
    curve = helpers.stability_curve(samples)
    assert curve.k.max() == 6 and len(curve) == 12
    shaky = curve[curve.case == "shaky"].set_index("k").agreement
    assert shaky[1] == pytest.approx(5 / 6) and shaky[3] == pytest.approx((5 / 6) ** 3 + 3 * (5 / 6) ** 2 / 6)
    summary = helpers.samples_for_stability(curve).loc["j"]
    mean = curve.groupby("k").agreement.mean()
    assert summary.k_for_95 == helpers.stable_k(mean) and (mean[mean.index >= summary.k_for_95] >= 0.95).all()
    assert summary.cases_stable_at_5 == 1.0 and summary.samples_per_case == 6  # shaky at 5: 0.965
    assert summary.cases_stable_at_n == 0.5  # shaky at 6: 0.938, since a 3-3 tie fails
    assert (curve.agreement + curve.disagreement).eq(1).all()


def test_stability_says_none_when_95_is_not_reached_within_the_samples():
    samples = pd.DataFrame({"judge": "coin", "case": "c", "passed": [1, 0, 1, 0, 1, 0]})
    summary = helpers.samples_for_stability(helpers.stability_curve(samples)).loc["coin"]
    assert np.isnan(summary.k_for_95) and summary.cases_stable_at_n == 0.0


def test_stable_k_waits_until_agreement_stays_above_the_level():
    dips = pd.Series([0.80, 0.96, 0.93, 0.97, 0.98], index=range(1, 6))  # k = 2 reaches 0.95, k = 3 falls back
    assert helpers.stable_k(dips) == 4
    assert helpers.stable_k(pd.Series([0.99, 0.97], index=[1, 2])) == 1
    assert np.isnan(helpers.stable_k(pd.Series([0.96, 0.90], index=[1, 2])))


def test_noise_split_uses_sample_variances_per_case():
    agent = pd.DataFrame({"case": ["a"] * 5 + ["b"] * 5, "passed": [1, 0, 1, 0, 1] + [1] * 5})
    judge = pd.DataFrame({"case": ["a"] * 15 + ["b"] * 15, "passed": [1] * 15 + [1] * 14 + [0]})
    split, overall = helpers.noise_split(agent, judge)
    assert split.loc["a", "agent_and_judge"] == pytest.approx(0.3)  # var([1,0,1,0,1], ddof=1)
    assert split.loc["a", "judge_only"] == 0 and split.loc["a", "agent_part"] == pytest.approx(0.3)
    assert split.loc["b", "judge_only"] == pytest.approx(1 / 15)  # 15/14 * (14/15) * (1/15)
    assert overall.loc["agent_and_judge", "mean"] == pytest.approx(0.15)
    assert overall.loc["agent_part", "low"] <= overall.loc["agent_part", "mean"] <= overall.loc["agent_part", "high"]


def test_judge_health_counts_unparsed_ties_not_evaluated_and_lost_rubrics():
    table = pd.DataFrame(
        {
            "run_id": "r", "repeat": 0, "judge": "j",
            "metric": ["ref"] * 4 + ["rubric"] * 2,
            "case": ["a", "a", "b", "b", "a", "a"], "invocation": 0,
            "sample_verdict": ["pass", "fail", "pass", "unparsed", "pass", "pass"],
            "status": ["PASSED", "PASSED", "NOT_EVALUATED", "NOT_EVALUATED", "PASSED", "PASSED"],
            "rubrics_seen": [None] * 4 + ["r1,r2,r3", "r1,r2,r3"],
            "rubric_verdicts": [None] * 4 + ["yes,yes,no", "yes"],
        }
    )  # fmt: skip
    health = helpers.judge_health(table).set_index("metric")
    assert health.loc["ref", "unparsed_share"] == 0.25 and health.loc["ref", "not_evaluated_share"] == 0.5
    assert health.loc["ref", "tie_share"] == 0.5 and health.loc["ref", "rubric_verdicts_lost"] == 0
    assert health.loc["rubric", "rubric_verdicts_lost"] == 2 and health.loc["rubric", "tie_share"] == 0


def test_calibration_rescues_a_lenient_judge_on_held_out_folds():
    # a lenient judge: every score is above 0.5, but fails score lower than passes
    labels = pd.Series([1] * 10 + [0] * 10)
    scores = pd.Series([1.0] * 10 + [0.6] * 10)
    result = helpers.calibrate_cv(scores, labels)
    assert result["balanced_accuracy_raw"] == 0.5 and result["kappa_raw"] == 0
    assert result["balanced_accuracy_calibrated"] == 1.0 and result["kappa_calibrated"] == 1.0
    assert all(0.6 < t <= 1.0 for t in result["thresholds"]) and result["folds"] == 5
    low, high = result["balanced_accuracy_raw_ci"]
    assert low <= 0.5 <= high


def test_calibration_refuses_labels_with_too_few_of_one_outcome():
    assert "error" in helpers.calibrate_cv(pd.Series([0.2, 0.9]), pd.Series([1, 1]))
    assert "error" in helpers.calibrate_cv(pd.Series([0.2, 0.9, 0.4]), pd.Series([1, 0, 0]))  # one pass only


def test_panel_alpha_interval_contains_the_estimate():
    rng = np.random.default_rng(3)
    truth = rng.integers(0, 2, 30)
    verdicts = pd.DataFrame({f"j{i}": np.where(rng.random(30) < 0.8, truth, 1 - truth) for i in range(3)})
    result = helpers.panel_agreement(verdicts)
    low, high = result["alpha_ci"]
    assert low <= result["krippendorff_alpha"] <= high and low < high


def test_vectorized_kappa_and_balanced_accuracy_match_scikit_learn():
    from sklearn.metrics import balanced_accuracy_score, cohen_kappa_score

    from workbook.judge_stats import balanced_accuracy, cohen_kappa

    rng = np.random.default_rng(11)
    for _ in range(20):
        truth, said = rng.integers(0, 2, 25), rng.integers(0, 2, 25)
        assert cohen_kappa(truth, said) == pytest.approx(cohen_kappa_score(truth, said))
        assert balanced_accuracy(truth, said) == pytest.approx(balanced_accuracy_score(truth, said))
    rows = rng.integers(0, 2, (4, 25)), rng.integers(0, 2, (4, 25))
    assert cohen_kappa(*rows) == pytest.approx([cohen_kappa_score(a, b) for a, b in zip(*rows, strict=True)])
    assert cohen_kappa([1, 1], [1, 1]) == 1.0 and balanced_accuracy([1, 1], [1, 0]) == 0.5


def test_judge_stability_tells_answers_apart_by_the_columns_named():
    """A grid judges one case under two prompt versions: two answers, each unanimous, not one coin flip."""
    rows = [
        {"judge": "j", "case": "c", "prompt_version": version, "invocation": 0, "repeat": 0, "sample": sample}
        | {"sample_score": float(version == "v1"), "score": None, "threshold": 0.5}
        for version in ("v1", "v4")
        for sample in range(6)
    ]
    rouge = {"judge": "rouge", "case": "c", "prompt_version": "v1", "invocation": 0, "repeat": 0, "sample": 0}
    table = pd.DataFrame([*rows, rouge | {"sample_score": None, "score": 0.1, "threshold": 0.5}])
    by_answer = helpers.judge_stability(table, answer=("prompt_version", "case", "invocation"))
    assert by_answer.judge.tolist() == ["j"]  # ROUGE has no samples to vote
    assert by_answer.loc[0, "cases"] == 2 and by_answer.loc[0, "k_for_95"] == 1
    pooled = helpers.judge_stability(table).set_index("judge").loc["j"]
    assert pooled.cases == 1 and np.isnan(pooled.k_for_95)  # one case, half pass: no stable majority
