"""Agreement statistics on small hand-made tables with known answers."""

import numpy as np
import pandas as pd
import pytest

import helpers


def _panel(rows):
    """A run table from (judge, case, repeat, sample, sample_score, status) tuples."""
    table = pd.DataFrame(rows, columns=["judge", "case", "repeat", "sample", "sample_score", "status"])
    return table.assign(score=table.sample_score, threshold=0.5)


def test_perfect_and_total_disagreement():
    verdicts = pd.DataFrame({"a": [1, 0, 1, 0], "b": [1, 0, 1, 0], "c": [0, 1, 0, 1]})
    kappas = helpers.pairwise_kappa(verdicts)
    assert kappas.loc["a", "b"] == pytest.approx(1.0)
    assert kappas.loc["a", "c"] == pytest.approx(-1.0)


def test_textbook_cohen_kappa():
    # Wikipedia's worked example: 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no -> kappa 0.4
    first = [1] * 20 + [1] * 5 + [0] * 10 + [0] * 15
    second = [1] * 20 + [0] * 5 + [1] * 10 + [0] * 15
    kappas = helpers.pairwise_kappa(pd.DataFrame({"A": first, "B": second}))
    assert kappas.loc["A", "B"] == pytest.approx(0.4)


def test_panel_agreement_matches_the_libraries_on_a_random_table():
    import krippendorff
    from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

    rng = np.random.default_rng(7)
    truth = rng.integers(0, 2, 30)
    verdicts = pd.DataFrame({f"j{i}": np.where(rng.random(30) < 0.8, truth, 1 - truth) for i in range(4)})
    result = helpers.panel_agreement(verdicts)
    assert result["fleiss_kappa"] == pytest.approx(fleiss_kappa(aggregate_raters(verdicts.to_numpy())[0]))
    expected_alpha = krippendorff.alpha(
        reliability_data=verdicts.to_numpy().T.astype(float), level_of_measurement="nominal"
    )
    assert result["krippendorff_alpha"] == pytest.approx(expected_alpha)
    assert 0.2 < result["fleiss_kappa"] < 0.8


def test_flips_are_counted_per_judge_and_case():
    panel = _panel(
        [
            ("steady", "c1", 0, 0, 1.0, "PASSED"), ("steady", "c1", 0, 1, 1.0, "PASSED"),
            ("steady", "c1", 1, 0, 1.0, "PASSED"), ("steady", "c1", 1, 1, 1.0, "PASSED"),
            ("fickle", "c1", 0, 0, 1.0, "PASSED"), ("fickle", "c1", 0, 1, 1.0, "PASSED"),
            ("fickle", "c1", 1, 0, 0.0, "FAILED"), ("fickle", "c1", 1, 1, 1.0, "FAILED"),
        ]
    )  # fmt: skip
    flips = helpers.flip_rates(panel).set_index("judge")
    assert flips.loc["steady", "minority_share"] == 0 and not flips.loc["steady", "run_flip"]
    assert flips.loc["fickle", "minority_share"] == pytest.approx(0.25)
    assert flips.loc["fickle", "verdicts"] == 4 and flips.loc["fickle", "run_flip"]


def test_versus_truth_counts_failures_caught():
    truth = pd.Series([1, 1, 0, 0], index=list("abcd"))
    verdicts = pd.DataFrame({"lenient": [1, 1, 1, 1], "strict": [1, 0, 0, 0]}, index=list("abcd"))
    table = helpers.versus_truth(verdicts, truth)
    assert table.loc["lenient", "accuracy"] == 0.5 and table.loc["lenient", "fail_recall"] == 0
    assert table.loc["strict", "fail_recall"] == 1 and table.loc["strict", "fail_precision"] == pytest.approx(
        2 / 3, abs=1e-3
    )


def test_bootstrap_interval_contains_the_estimate_and_shrinks_with_more_data():
    rng = np.random.default_rng(1)
    small = rng.integers(0, 2, 20)
    large = rng.integers(0, 2, 2000)
    estimate, low, high = helpers.bootstrap_ci(small)
    assert low <= estimate <= high and estimate == pytest.approx(small.mean())
    _, large_low, large_high = helpers.bootstrap_ci(large)
    assert (large_high - large_low) < (high - low) / 3


def test_kappa_interval_contains_the_estimate():
    rng = np.random.default_rng(3)
    first = pd.Series(rng.integers(0, 2, 40))
    second = first.where(rng.random(40) < 0.8, 1 - first)
    estimate, low, high = helpers.kappa_ci(first, second)
    assert low <= estimate <= high and low < high


def test_case_verdicts_and_pass_rates_read_the_run_table():
    panel = _panel(
        [
            ("j1", "c1", 0, 0, 1.0, "PASSED"), ("j1", "c2", 0, 0, 0.0, "FAILED"),
            ("j2", "c1", 0, 0, 1.0, "PASSED"), ("j2", "c2", 0, 0, 1.0, "PASSED"),
        ]
    )  # fmt: skip
    verdicts = helpers.case_verdicts(panel)
    assert verdicts.to_dict() == {"j1": {"c1": 1, "c2": 0}, "j2": {"c1": 1, "c2": 1}}
    rates = helpers.pass_rates(panel)
    assert rates.loc["j1", "pass_rate"] == 0.5 and rates.loc["j2", "pass_rate"] == 1.0
