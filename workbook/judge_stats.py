"""Judge statistics that follow the data's design: which unit is resampled, which test pairs what.

One bootstrap engine (scipy.stats.bootstrap, percentile, 95%) serves every interval over answers; Wilson
intervals (statsmodels) serve shares of independent cases; McNemar (statsmodels) pairs verdicts on the same cases.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

LITERATURE_TRIALS = 11  # "The Coin Flip Judge?" (Yagubyan 2026): trials for a 95% majority-vote recovery
ADK_DEFAULT_SAMPLES = 5


def wilson(successes: int, total: int) -> tuple[float, float]:
    """Return the 95% Wilson interval of a share of independent trials (statsmodels); NaNs for none."""
    from statsmodels.stats.proportion import proportion_confint

    if total == 0:
        return float("nan"), float("nan")
    low, high = proportion_confint(successes, total, alpha=0.05, method="wilson")
    return float(low), float(high)


def bootstrap_ci(
    values: Any, statistic: Callable | None = None, resamples: int = 2000, seed: int = 0, vectorized: bool = False
) -> tuple[float, float, float]:
    """Return (estimate, low, high): a statistic and its 95% percentile bootstrap interval (scipy.stats.bootstrap).

    `values` is one array, one entry per resampled unit (default statistic: the mean), or a tuple of
    arrays paired by unit (resampled together, as the answers of a judge-vs-judge table). A statistic of
    paired arrays that takes `axis` may say so (`vectorized=True`): the bootstrap then runs in one pass.
    """
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
        vectorized=vectorized or len(samples) == 1,
        confidence_level=0.95,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    low = estimate if np.isnan(low) else float(low)
    high = estimate if np.isnan(high) else float(high)
    return estimate, min(low, estimate), max(high, estimate)


def cluster_bootstrap(
    values: pd.Series, clusters: pd.Series, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Return (mean, low, high): the mean of `values` with a 95% interval that resamples whole clusters.

    Judge samples and repeats of one answer are not independent draws of the judge's pass rate; the
    answers are. So the interval resamples answers with replacement and keeps each answer's samples together
    (the mean of a resample is its samples' total over its samples' count).
    """
    frame = pd.DataFrame({"value": values.to_numpy(dtype=float), "cluster": clusters.to_numpy()})
    sums = frame.groupby("cluster")["value"].agg(["sum", "count"])
    if len(sums) < 2:
        estimate = float(sums["sum"].sum() / sums["count"].sum()) if len(sums) else float("nan")
        return estimate, float("nan"), float("nan")

    def pooled_mean(total, count, axis=-1):
        return np.sum(total, axis=axis) / np.sum(count, axis=axis)

    return bootstrap_ci((sums["sum"].to_numpy(), sums["count"].to_numpy()), pooled_mean, resamples, seed, True)


def paired_mcnemar(before: pd.Series, after: pd.Series, labels: tuple[str, str] = ("before", "after")) -> dict:
    """Return fixed/broke counts, the exact McNemar p-value (statsmodels) and a sentence, for two verdicts
    (1 = pass) on the same cases; cases missing from either side are left out."""
    from statsmodels.stats.contingency_tables import mcnemar

    both = pd.concat([before.rename("before"), after.rename("after")], axis=1).dropna().astype(int)
    fixed = int(((both.before == 0) & (both.after == 1)).sum())
    broke = int(((both.before == 1) & (both.after == 0)).sum())
    table = [
        [int(((both.before == 1) & (both.after == 1)).sum()), broke],
        [fixed, int(((both.before == 0) & (both.after == 0)).sum())],
    ]
    p_value = float(mcnemar(table, exact=True).pvalue) if fixed + broke else 1.0
    first, second = labels
    differs = p_value < 0.05
    sentence = (
        f"On {len(both)} paired cases, {second} passes {fixed} that {first} failed and fails {broke} that {first} "
        f"passed (exact McNemar p = {p_value:.2g}): "
        + (
            "a difference this lopsided is unlikely to be chance."
            if differs
            else "a split like this is common by chance, so these cases cannot tell the two apart."
        )
    )
    return {
        "cases": len(both),
        "fixed": fixed,
        "broke": broke,
        "p_value": p_value,
        "differs": differs,
        "sentence": sentence,
    }


def majority_agreement(pass_share: float, k: int) -> float:
    """Return P(a majority of k fresh samples gives the same verdict as the judge's long-run majority).

    Samples are modelled as independent draws with the observed pass share (drawing k from the recorded
    samples with replacement); a tie counts as a fail, as in ADK, so the long-run verdict is a pass only
    when the share is above one half.
    """
    from scipy.stats import binom

    p_majority_pass = float(binom.sf(k // 2, k, pass_share))  # strictly more than half of k pass
    return p_majority_pass if pass_share > 0.5 else 1.0 - p_majority_pass


def stability_curve(samples: pd.DataFrame, max_k: int | None = None) -> pd.DataFrame:
    """Return per judge, case and k = 1..N: the probability that a majority of k samples agrees with (and
    `disagreement`: differs from) the case's all-samples majority.

    `samples` has one row per judge sample: judge, case, passed (1/0). N is the fewest samples any case of
    that judge has (or `max_k`): the curve does not extrapolate beyond what was recorded.
    """
    shares = samples.groupby(["judge", "case"])["passed"].agg(["mean", "count"]).reset_index()
    rows = []
    for judge, group in shares.groupby("judge", sort=False):
        top = int(group["count"].min()) if max_k is None else max_k
        for r in group.itertuples():
            for k in range(1, top + 1):
                agree = majority_agreement(r.mean, k)
                rows.append(
                    {"judge": judge, "case": r.case, "samples": r.count, "pass_share": r.mean, "k": k}
                    | {"agreement": agree, "disagreement": 1.0 - agree}
                )
    return pd.DataFrame(rows)


def stable_k(agreement: pd.Series, level: float = 0.95) -> float:
    """Return the smallest k (the Series' index) from which agreement stays at or above `level` up to the
    largest k recorded; NaN when the last k is below it. (Ties fail, so an even k can dip below an odd one.)"""
    below = agreement[agreement < level]
    if len(below) and below.index.max() == agreement.index.max():
        return float("nan")
    return float(below.index.max() + 1 if len(below) else agreement.index.min())


def samples_for_stability(curve: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Return per judge: cases, recorded samples N, mean agreement and share of stable cases at ADK's 5
    samples, the share of cases stable at N, and `k_for_95`: the smallest k from which the mean agreement
    over cases stays at or above `level` up to N (NaN: not within N)."""
    rows = []
    for judge, group in curve.groupby("judge", sort=False):
        mean = group.groupby("k")["agreement"].mean()
        at_default = group[group.k == ADK_DEFAULT_SAMPLES]
        rows.append(
            {
                "judge": judge,
                "cases": int(group.case.nunique()),
                "samples_per_case": int(group.k.max()),
                "mean_agreement_at_5": float(mean.get(ADK_DEFAULT_SAMPLES, float("nan"))),
                "cases_stable_at_5": float((at_default.agreement >= level).mean()) if len(at_default) else float("nan"),
                "cases_stable_at_n": float((group[group.k == group.k.max()].agreement >= level).mean()),
                "k_for_95": stable_k(mean, level),
            }
        )
    return pd.DataFrame(rows).set_index("judge")


def noise_split(agent_noise: pd.DataFrame, judge_noise: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Return (per case, overall): the variance of one verdict across agent repeats (one judge sample each:
    agent and judge vary) and across judge samples on one frozen answer (the judge alone), and their
    difference, the part due to the agent. Overall means carry 95% intervals resampled by case.

    Both inputs have one row per verdict: case, passed (1/0). Variances are sample variances (ddof=1), so
    runs with different numbers of verdicts compare fairly. The judge-only variance comes from one answer
    per case and stands for the judge's noise on every answer of that case.
    """
    split = pd.DataFrame(
        {
            "agent_and_judge": agent_noise.groupby("case")["passed"].var(ddof=1),
            "judge_only": judge_noise.groupby("case")["passed"].var(ddof=1),
        }
    ).dropna()
    split["agent_part"] = split.agent_and_judge - split.judge_only
    overall = pd.DataFrame(
        {column: bootstrap_ci(split[column].to_numpy()) for column in split.columns}, index=["mean", "low", "high"]
    ).T
    return split, overall


def judge_health(table: pd.DataFrame) -> pd.DataFrame:
    """Return per judge and metric: samples, unparsed share, NOT_EVALUATED share (of invocations), tie share
    (of invocations whose samples split evenly) and rubric verdicts lost (rubrics the judge prompt listed
    minus verdicts the parser read; NaN for metrics without rubrics)."""
    rows = []
    for (judge, metric), group in table.groupby(["judge", "metric"], sort=False):
        invocations = group.groupby(["run_id", "repeat", "case", "invocation"])
        votes = invocations["sample_verdict"].agg(lambda v: (v.eq("pass").sum(), v.eq("fail").sum()))
        ties = sum(1 for p, f in votes if p == f and p > 0)
        rows.append(
            {
                "judge": judge,
                "metric": metric,
                "samples": len(group),
                "unparsed_share": float(group["sample_verdict"].eq("unparsed").mean()),
                "not_evaluated_share": float(invocations["status"].first().eq("NOT_EVALUATED").mean()),
                "tie_share": ties / len(votes) if len(votes) else 0.0,
                "rubric_verdicts_lost": _rubric_verdicts_lost(group),
            }
        )
    return pd.DataFrame(rows)


def _rubric_verdicts_lost(group: pd.DataFrame) -> float:
    seen = group.get("rubrics_seen", pd.Series(dtype=object)).dropna()
    if seen.eq("").all():
        return 0.0  # no rubric listed in any judge prompt: nothing to lose

    def count(column: pd.Series) -> pd.Series:
        return column.fillna("").map(lambda text: len([part for part in str(text).split(",") if part]))

    return float((count(group["rubrics_seen"]) - count(group["rubric_verdicts"])).clip(lower=0).sum())


def calibrate_cv(scores: pd.Series, labels: pd.Series, folds: int = 5, seed: int = 0) -> dict:
    """Return held-out balanced accuracy and kappa of a judge's per-case score against labels (1 = pass),
    raw (pass when the score is above one half, ADK's majority) and with a threshold chosen on the training
    folds (stratified k-fold): every case is predicted by a threshold that never saw its label.

    Each figure carries a 95% interval resampled by case (`..._ci`); thresholds lists the fold thresholds.
    """
    from sklearn.model_selection import StratifiedKFold

    s, y = _labelled_scores(scores, labels)
    fewest = int(np.bincount(y, minlength=2).min())
    if fewest < 2:
        return {"cases": len(y), "error": "cross-validation needs at least two labelled passes and two fails"}
    folds = min(folds, fewest)
    raw = (s > 0.5).astype(int)
    tuned, thresholds = np.zeros_like(y), []
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=seed).split(s, y):
        best = _best_threshold(s[train], y[train])
        thresholds.append(best)
        tuned[test] = (s[test] >= best).astype(int)
    result: dict[str, Any] = {"cases": len(y), "passes": int(y.sum()), "folds": folds, "thresholds": thresholds}
    for name, predicted in (("raw", raw), ("calibrated", tuned)):
        for metric, function in (("balanced_accuracy", balanced_accuracy), ("kappa", cohen_kappa)):
            estimate, low, high = bootstrap_ci((y, predicted), function, vectorized=True)
            result[f"{metric}_{name}"], result[f"{metric}_{name}_ci"] = estimate, (low, high)
    return result


def fit_threshold(scores: pd.Series, labels: pd.Series) -> float:
    """Return the pass threshold (pass when score >= it) with the best balanced accuracy against the labels
    (1 = pass) on every labelled case: the threshold a calibrated judge would use from now on. Its accuracy
    must come from calibrate_cv's held-out folds, never from the cases it was fitted on."""
    return _best_threshold(*_labelled_scores(scores, labels))


def _labelled_scores(scores: pd.Series, labels: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """The (score, 0/1 label) arrays of the cases that have both."""
    data = pd.concat([scores.rename("score"), labels.rename("label")], axis=1).dropna()
    return data.score.to_numpy(dtype=float), data.label.astype(int).to_numpy()


def _best_threshold(scores: np.ndarray, labels: np.ndarray) -> float:
    candidates = np.unique(np.concatenate([[0.0], scores, [1.0]]))
    accuracy = balanced_accuracy(labels, scores >= candidates[:, None])
    return float(candidates[int(np.argmax(accuracy))])  # ties: the lowest threshold that reaches the best


def balanced_accuracy(truth: Any, predicted: Any, axis: int = -1) -> Any:
    """Return the balanced accuracy of 0/1 verdicts against 0/1 labels along `axis` (scikit-learn's on such
    data, vectorized so a bootstrap runs in one pass); where labels hold one class, plain accuracy."""
    truth, predicted = np.asarray(truth, dtype=bool), np.asarray(predicted, dtype=bool)
    passes, fails = truth.sum(axis=axis), (~truth).sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        recall_pass = (truth & predicted).sum(axis=axis) / passes
        recall_fail = (~truth & ~predicted).sum(axis=axis) / fails
    accuracy = (truth == predicted).mean(axis=axis)
    return np.where((passes > 0) & (fails > 0), (recall_pass + recall_fail) / 2, accuracy)[()]


def cohen_kappa(first: Any, second: Any, axis: int = -1) -> Any:
    """Return Cohen's kappa of two 0/1 verdict arrays along `axis` (scikit-learn's on such data, vectorized
    so a bootstrap runs in one pass); 1 when both gave one identical label throughout."""
    first, second = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    observed = (first == second).mean(axis=axis)
    p1, p2 = first.mean(axis=axis), second.mean(axis=axis)
    expected = p1 * p2 + (1 - p1) * (1 - p2)
    with np.errstate(invalid="ignore", divide="ignore"):
        kappa = (observed - expected) / (1 - expected)
    return np.where(expected >= 1, 1.0, kappa)[()]
