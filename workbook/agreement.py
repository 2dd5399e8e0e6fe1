"""Judge agreement statistics (notebooks 04 and 05): verdicts, flip rates, kappas, alpha, intervals.

Statistics come from libraries: scikit-learn (accuracy, precision, recall), statsmodels (Fleiss' kappa),
krippendorff (alpha); Cohen's kappa and every interval come from workbook.judge_stats (kappa vectorized for
the bootstrap, tested against scikit-learn's; intervals resample answers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbook.judge_stats import bootstrap_ci, cluster_bootstrap, cohen_kappa

if TYPE_CHECKING:
    import pandas as pd


def sample_verdicts(table: pd.DataFrame, keep: tuple[str, ...] = ()) -> pd.DataFrame:
    """Return one row per judge sample: judge, case, repeat, sample, a 1/0 pass verdict, and the `keep` columns."""
    rows = table.copy()
    score = rows["sample_score"].fillna(rows["score"])
    rows["passed"] = (score >= rows["threshold"].fillna(0.5)).astype(int).where(score.notna())
    return rows.dropna(subset=["passed"])[["judge", "case", "repeat", "sample", "passed", *keep]]


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


def pairwise_kappa(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Return a judge x judge table of Cohen's kappa on case-level verdicts."""
    import pandas as pd

    judges = list(verdicts.columns)
    matrix = pd.DataFrame(index=judges, columns=judges, dtype=float)
    for first in judges:
        for second in judges:
            matrix.loc[first, second] = cohen_kappa(verdicts[first], verdicts[second])
    return matrix


def panel_agreement(verdicts: pd.DataFrame) -> dict:
    """Return Fleiss' kappa (statsmodels) and Krippendorff's alpha (krippendorff) across all judges, with
    alpha's 95% interval resampling the cases (`alpha_ci`)."""
    from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

    unanimous = verdicts.stack().nunique() <= 1
    columns = tuple(verdicts[judge].to_numpy() for judge in verdicts.columns)
    estimate, low, high = bootstrap_ci(columns, _alpha)
    return {
        "fleiss_kappa": 1.0 if unanimous else float(fleiss_kappa(aggregate_raters(verdicts.to_numpy())[0])),
        "krippendorff_alpha": estimate,
        "alpha_ci": (low, high),
    }


def _alpha(*columns) -> float:
    """Krippendorff's alpha (nominal) of one column of verdicts per judge; 1 when every verdict is the same."""
    import krippendorff
    import numpy as np

    reliability = np.vstack(columns).astype(float)  # raters x units
    if len(np.unique(reliability)) == 1:
        return 1.0
    return float(krippendorff.alpha(reliability_data=reliability, level_of_measurement="nominal"))


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
                "kappa": cohen_kappa(expected, said),
            }
        )
    return pd.DataFrame(rows).set_index("judge").round(3)


def pass_rates(table: pd.DataFrame) -> pd.DataFrame:
    """Return each judge's pass rate over all its samples, with a 95% interval that resamples answers
    (cluster bootstrap: an answer's samples and repeats stay together)."""
    import pandas as pd

    samples = sample_verdicts(table)
    rows = []
    for judge, group in samples.groupby("judge", sort=False):
        estimate, low, high = cluster_bootstrap(group["passed"], group["case"])
        rows.append(
            {"judge": judge, "answers": group["case"].nunique(), "samples": len(group)}
            | {"pass_rate": estimate, "ci_low": low, "ci_high": high}
        )
    return pd.DataFrame(rows).set_index("judge").round(3)


def kappa_ci(first: pd.Series, second: pd.Series) -> tuple[float, float, float]:
    """Return Cohen's kappa between two case-level verdict Series with a 95% interval resampling the cases."""
    return bootstrap_ci((first.to_numpy(), second.to_numpy()), cohen_kappa, vectorized=True)
