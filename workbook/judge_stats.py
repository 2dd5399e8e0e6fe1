"""Judge statistics that follow the data's design: which unit is resampled, which test pairs what."""

from __future__ import annotations

import numpy as np
import pandas as pd


def wilson(successes: int, total: int) -> tuple[float, float]:
    """Return the 95% Wilson interval of a share of independent trials (statsmodels); NaNs for none."""
    from statsmodels.stats.proportion import proportion_confint

    if total == 0:
        return float("nan"), float("nan")
    low, high = proportion_confint(successes, total, alpha=0.05, method="wilson")
    return float(low), float(high)


LITERATURE_TRIALS = 11  # "The Coin Flip Judge?" (Yagubyan 2026): trials for a 95% majority-vote recovery
ADK_DEFAULT_SAMPLES = 5


def cluster_bootstrap(
    values: pd.Series, clusters: pd.Series, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Return (mean, low, high): the mean of `values` with a 95% interval that resamples whole clusters.

    Judge samples and repeats of one answer are not independent draws of the judge's pass rate; the
    answers are. So the interval resamples answers with replacement and keeps each answer's samples together.
    """
    frame = pd.DataFrame({"value": values.to_numpy(dtype=float), "cluster": clusters.to_numpy()})
    sums = frame.groupby("cluster")["value"].agg(["sum", "count"])
    estimate = sums["sum"].sum() / sums["count"].sum()
    if len(sums) < 2:
        return float(estimate), float("nan"), float("nan")
    picks = np.random.default_rng(seed).integers(0, len(sums), size=(resamples, len(sums)))
    totals = sums["sum"].to_numpy()[picks].sum(axis=1) / sums["count"].to_numpy()[picks].sum(axis=1)
    low, high = np.percentile(totals, [2.5, 97.5])
    return float(estimate), float(low), float(high)


def paired_mcnemar(before: pd.Series, after: pd.Series, labels: tuple[str, str] = ("before", "after")) -> dict:
    """Return fixed/broke counts and the exact McNemar p-value for two verdicts on the same cases (1 = pass)."""
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
        f"passed (exact McNemar p = {p_value:.2f}): "
        + ("the difference is unlikely to be chance." if differs else "these cases cannot tell the two apart.")
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

    Samples are modelled as independent draws with the observed pass share; a tie counts as a fail (as in ADK).
    """
    from scipy.stats import binom

    passes_needed = k // 2 + 1  # strictly more than half
    p_majority_pass = float(binom.sf(passes_needed - 1, k, pass_share))
    long_run_pass = pass_share > 0.5
    return p_majority_pass if long_run_pass else 1.0 - p_majority_pass


def stability_curve(samples: pd.DataFrame, max_k: int = 25) -> pd.DataFrame:
    """Return per judge, case and k the probability that k samples agree with the case's long-run majority.

    `samples` has one row per judge sample: judge, case, passed (1/0).
    """
    shares = samples.groupby(["judge", "case"])["passed"].agg(["mean", "count"]).reset_index()
    rows = [
        {
            "judge": r.judge,
            "case": r.case,
            "samples": r.count,
            "pass_share": r.mean,
            "k": k,
            "agreement": majority_agreement(r.mean, k),
        }
        for r in shares.itertuples()
        for k in range(1, max_k + 1)
    ]
    return pd.DataFrame(rows)


def samples_for_stability(curve: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Return per judge: cases, the share stable at ADK's 5 samples, and the smallest k whose mean agreement reaches `level`."""
    mean = curve.groupby(["judge", "k"])["agreement"].mean().reset_index()
    per_case = curve[curve.k == ADK_DEFAULT_SAMPLES].groupby("judge")["agreement"].apply(lambda a: (a >= level).mean())
    rows = []
    for judge, group in mean.groupby("judge"):
        reached = group[group.agreement >= level]
        rows.append(
            {
                "judge": judge,
                "cases": int(curve[curve.judge == judge].case.nunique()),
                "mean_agreement_at_5": float(group[group.k == ADK_DEFAULT_SAMPLES].agreement.iloc[0]),
                "cases_stable_at_5": float(per_case[judge]),
                "k_for_95": int(reached.k.min()) if len(reached) else None,
            }
        )
    return pd.DataFrame(rows)


def noise_split(
    agent_noise: pd.DataFrame, judge_noise: pd.DataFrame, resamples: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """Return the verdict variance from agent repeats (one judge sample each) and from judge samples on one
    frozen answer, per case and overall with 95% intervals resampled by case.

    Both inputs have one row per verdict: case, passed (1/0). Verdicts over agent repeats vary with the agent
    *and* the judge; over judge samples on a fixed answer, with the judge alone.
    """

    def per_case(frame: pd.DataFrame) -> pd.Series:
        return frame.groupby("case")["passed"].agg(lambda s: s.mean() * (1 - s.mean()))

    split = pd.DataFrame({"agent_and_judge": per_case(agent_noise), "judge_only": per_case(judge_noise)}).dropna()
    split["agent_share_estimate"] = (split.agent_and_judge - split.judge_only).clip(lower=0)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(split), size=(resamples, len(split)))
    summary = {}
    for column in ["agent_and_judge", "judge_only", "agent_share_estimate"]:
        values = split[column].to_numpy()
        means = values[picks].mean(axis=1)
        summary[column] = (values.mean(), *np.percentile(means, [2.5, 97.5]))
    overall = pd.DataFrame(summary, index=["mean", "low", "high"]).T
    return split, overall


def judge_health(table: pd.DataFrame) -> pd.DataFrame:
    """Return per judge and metric: samples, unparsed share, NOT_EVALUATED share, tie share, rubric verdicts lost."""
    rows = []
    for (judge, metric), group in table.groupby(["judge", "metric"]):
        invocations = group.groupby(["run_id", "repeat", "case", "invocation"])
        votes = invocations["sample_verdict"].agg(lambda v: (v.eq("pass").sum(), v.eq("fail").sum()))
        ties = sum(1 for p, f in votes if p == f and p > 0)
        lost = 0
        if "rubrics_seen" in group and "rubric_verdicts" in group:
            seen = group["rubrics_seen"].fillna("").str.count(",") + group["rubrics_seen"].fillna("").ne("").astype(int)
            parsed = group["rubric_verdicts"].fillna("").str.count(",") + group["rubric_verdicts"].fillna("").ne(
                ""
            ).astype(int)
            lost = int((seen - parsed).clip(lower=0).sum())
        rows.append(
            {
                "judge": judge,
                "metric": metric,
                "samples": len(group),
                "unparsed_share": float(group["sample_verdict"].eq("unparsed").mean()),
                "not_evaluated_share": float(invocations["status"].first().eq("NOT_EVALUATED").mean()),
                "tie_share": ties / len(votes) if len(votes) else 0.0,
                "rubric_verdicts_lost": lost,
            }
        )
    return pd.DataFrame(rows)


def calibrate_cv(scores: pd.Series, labels: pd.Series, folds: int = 5, seed: int = 0) -> dict:
    """Return held-out balanced accuracy and kappa of a judge's per-case score, at 0.5 and at a threshold
    chosen on the training folds (cross-validated); every figure comes from held-out cases only."""
    from sklearn.metrics import balanced_accuracy_score, cohen_kappa_score
    from sklearn.model_selection import StratifiedKFold

    data = pd.concat([scores.rename("score"), labels.rename("label")], axis=1).dropna()
    y, s = data.label.astype(int).to_numpy(), data.score.to_numpy()
    folds = max(2, min(folds, int(np.bincount(y).min()))) if len(set(y)) == 2 else 0
    if not folds:
        return {"cases": len(data), "error": "labels hold one class only: no calibration possible"}
    raw = (s > 0.5).astype(int)
    tuned = np.zeros_like(y)
    thresholds = []
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=seed).split(s, y):
        candidates = np.unique(np.concatenate([[0.0], s[train], [1.0]]))
        best = max(candidates, key=lambda t: balanced_accuracy_score(y[train], (s[train] >= t).astype(int)))
        thresholds.append(float(best))
        tuned[test] = (s[test] >= best).astype(int)
    return {
        "cases": len(data),
        "folds": folds,
        "balanced_accuracy_raw": balanced_accuracy_score(y, raw),
        "kappa_raw": cohen_kappa_score(y, raw),
        "balanced_accuracy_calibrated": balanced_accuracy_score(y, tuned),
        "kappa_calibrated": cohen_kappa_score(y, tuned),
        "thresholds": thresholds,
    }
