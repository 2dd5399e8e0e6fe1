"""Judge agreement statistics (notebooks 04 and 05): verdicts, flip rates, kappas, alpha, intervals.

Every statistic comes from a library: scikit-learn (Cohen's kappa, accuracy, precision, recall),
statsmodels (Fleiss' kappa), krippendorff (alpha), scipy (bootstrap intervals).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def sample_verdicts(table: pd.DataFrame) -> pd.DataFrame:
    """Return one row per judge sample: judge, case, repeat, sample and a 1/0 pass verdict."""
    rows = table.copy()
    score = rows["sample_score"].fillna(rows["score"])
    rows["passed"] = (score >= rows["threshold"].fillna(0.5)).astype(int).where(score.notna())
    return rows.dropna(subset=["passed"])[["judge", "case", "repeat", "sample", "passed"]]


def case_verdicts(table: pd.DataFrame, repeat: int | None = 0) -> pd.DataFrame:
    """Return a case x judge table of ADK's aggregated verdicts (1 pass, 0 fail) for one repeat (None: majority of all)."""
    rows = table.drop_duplicates(["judge", "case", "repeat"]).copy()
    rows["passed"] = (rows["status"] == "PASSED").astype(int)
    if repeat is not None:
        rows = rows[rows["repeat"] == repeat]
    return (
        rows.pivot_table(index="case", columns="judge", values="passed", aggfunc="mean", sort=False).round().astype(int)
    )


def flip_rates(table: pd.DataFrame) -> pd.DataFrame:
    """Return per judge and case: how many verdicts, the pass share, the minority share, and flips.

    `minority_share` is 0 when every sample agreed and 0.5 for a coin flip; `run_flip` is True
    when ADK's aggregated status differed between repeats of the same case.
    """
    samples = sample_verdicts(table)
    grouped = samples.groupby(["judge", "case"])["passed"]
    result = grouped.agg(verdicts="count", pass_share="mean").reset_index()
    result["minority_share"] = result["pass_share"].map(lambda share: min(share, 1 - share))
    statuses = table.drop_duplicates(["judge", "case", "repeat"]).groupby(["judge", "case"])["status"].nunique()
    result["run_flip"] = result.set_index(["judge", "case"]).index.map(lambda key: statuses.get(key, 1) > 1)
    return result


def _kappa(first, second) -> float:
    """Cohen's kappa (scikit-learn), taken as 1 when both raters gave one identical label throughout."""
    import numpy as np
    from sklearn.metrics import cohen_kappa_score

    first, second = np.asarray(first), np.asarray(second)
    if len(set(first) | set(second)) == 1:
        return 1.0  # both raters gave one identical label throughout: perfect, if uninformative, agreement
    return float(cohen_kappa_score(first, second))


def pairwise_kappa(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Return a judge x judge table of Cohen's kappa (scikit-learn) on case-level verdicts."""
    import pandas as pd

    judges = list(verdicts.columns)
    matrix = pd.DataFrame(index=judges, columns=judges, dtype=float)
    for first in judges:
        for second in judges:
            matrix.loc[first, second] = _kappa(verdicts[first], verdicts[second])
    return matrix


def panel_agreement(verdicts: pd.DataFrame) -> dict:
    """Return Fleiss' kappa (statsmodels) and Krippendorff's alpha (krippendorff) across all judges."""
    import krippendorff
    import numpy as np
    from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

    counts, _ = aggregate_raters(verdicts.to_numpy())
    reliability = verdicts.to_numpy().T.astype(float)  # raters x units
    unanimous = len(np.unique(reliability)) == 1
    return {
        "fleiss_kappa": float(fleiss_kappa(counts)) if not unanimous else 1.0,
        "krippendorff_alpha": float(krippendorff.alpha(reliability_data=reliability, level_of_measurement="nominal"))
        if not unanimous
        else 1.0,
    }


def versus_truth(verdicts: pd.DataFrame, truth: pd.Series) -> pd.DataFrame:
    """Return each judge's accuracy, precision, recall (for catching failures) and kappa against `truth`.

    `truth` is a Series of 1 (pass) / 0 (fail) indexed by case: human labels, or another judge.
    """
    import pandas as pd
    from sklearn.metrics import accuracy_score, precision_score, recall_score

    common = verdicts.index.intersection(truth.index)
    expected = truth.loc[common].astype(int)
    if common.empty:  # no labels yet (a fresh workshop): nothing to compare
        return pd.DataFrame({"judge": verdicts.columns, "cases": 0}).set_index("judge")
    rows = []
    for judge in verdicts.columns:
        said = verdicts.loc[common, judge].astype(int)
        rows.append(
            {
                "judge": judge,
                "cases": len(common),
                "accuracy": accuracy_score(expected, said),
                "fail_precision": precision_score(expected, said, pos_label=0, zero_division=0),
                "fail_recall": recall_score(expected, said, pos_label=0, zero_division=0),
                "kappa": _kappa(expected, said),
            }
        )
    return pd.DataFrame(rows).set_index("judge").round(3)


def bootstrap_ci(
    values: Any, statistic: Callable | None = None, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Return (estimate, low, high): a statistic and its 95% bootstrap interval (scipy.stats.bootstrap).

    `values` is one array (default statistic: the mean) or a tuple of paired arrays.
    """
    import numpy as np
    from scipy.stats import bootstrap

    samples = values if isinstance(values, tuple) else (np.asarray(values, dtype=float),)
    statistic = statistic or (lambda sample, axis=-1: np.mean(sample, axis=axis))
    estimate = float(statistic(*samples))
    if len(samples[0]) < 2 or all(len(np.unique(sample)) == 1 for sample in samples):
        return estimate, estimate, estimate  # nothing varies: every resample gives the same value
    result = bootstrap(
        samples,
        statistic,
        n_resamples=resamples,
        paired=len(samples) > 1,
        vectorized=len(samples) == 1,
        confidence_level=0.95,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    low = estimate if np.isnan(low) else float(low)
    high = estimate if np.isnan(high) else float(high)
    return estimate, min(low, estimate), max(high, estimate)


def pass_rates(table: pd.DataFrame) -> pd.DataFrame:
    """Return each judge's pass rate over all samples with a 95% bootstrap interval."""
    import pandas as pd

    samples = sample_verdicts(table)
    rows = []
    for judge, group in samples.groupby("judge", sort=False):
        estimate, low, high = bootstrap_ci(group["passed"].to_numpy())
        rows.append({"judge": judge, "samples": len(group), "pass_rate": estimate, "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows).set_index("judge").round(3)


def kappa_ci(first: pd.Series, second: pd.Series) -> tuple[float, float, float]:
    """Return Cohen's kappa between two verdict Series with a paired 95% bootstrap interval."""
    return bootstrap_ci((first.to_numpy(), second.to_numpy()), _kappa)
