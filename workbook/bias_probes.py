"""Bias probes on the same answers (notebook 04): does a judge favour its own model's answers?

Self-preference cannot be read off one judge's pass rate: a judge that passes more of its own model's answers
may just be lenient, or its model may answer better. The probe has two agent models answer the same cases and
each model judge both sets. The difference in differences,
(own judge - other judge) on A's answers minus (own judge - other judge) on B's answers, cancels a judge's
general leniency and the answers' quality; what is left is a preference for one's own answers. Cases are the
resampled unit (both agents answer every case, so a case carries all four cells).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbook.agreement import sample_verdicts
from workbook.judge_stats import bootstrap_ci, cluster_bootstrap


def judged_by_each(table: pd.DataFrame) -> pd.DataFrame:
    """Return one row per (judge, agent model): answers, samples, pass share with a case-resampled 95% interval.

    `table` holds run tables of both agents (column agent_model) judged by both models."""
    samples = sample_verdicts(table, keep=("agent_model",))
    rows = []
    for (judge, agent), group in samples.groupby(["judge", "agent_model"], sort=False):
        share, low, high = cluster_bootstrap(group["passed"], group["case"])
        rows.append(
            {"judge": judge, "agent_model": agent, "cases": group["case"].nunique(), "samples": len(group)}
            | {"pass_share": share, "ci_low": low, "ci_high": high}
        )
    return pd.DataFrame(rows).set_index(["judge", "agent_model"]).round(3)


def self_preference(table: pd.DataFrame, first: str, second: str) -> dict:
    """Return the self-preference of two models that answered and judged the same cases: the difference in
    differences of pass shares (positive: each judge favours its own model's answers more than the other judge
    does), its 95% interval resampling cases, and a sentence."""
    samples = sample_verdicts(table, keep=("agent_model",))
    cells = [(judge, agent) for judge in (first, second) for agent in (first, second)]
    totals = samples.pivot_table(
        index="case", columns=["judge", "agent_model"], values="passed", aggfunc=["sum", "count"]
    ).dropna()  # only cases every cell judged
    arrays = tuple(totals[(kind, *cell)].to_numpy(dtype=float) for cell in cells for kind in ("sum", "count"))
    estimate, low, high = bootstrap_ci(arrays, _difference_in_differences, vectorized=True)
    found = low > 0
    sentence = (
        f"On {len(totals)} cases answered by both {first} and {second} and judged by both, the self-preference "
        f"(difference in differences of pass shares) is {estimate:+.3f} [{low:+.3f}, {high:+.3f}], resampling cases: "
        + (
            "each judge favours its own model's answers beyond what leniency and answer quality explain."
            if found
            else "the interval includes no preference, so these cases show no self-preference beyond chance."
        )
    )
    return {"cases": len(totals), "estimate": estimate, "ci_low": low, "ci_high": high, "found": found} | {
        "sentence": sentence
    }


def _difference_in_differences(*sums_and_counts: np.ndarray, axis: int = -1) -> np.ndarray:
    """(first judge - second judge) on first's answers minus the same on second's answers, pooled over cases.

    Arguments come in the order of the cells (first, first), (first, second), (second, first), (second, second)
    as (judge, agent), each as a sum and a count per case."""
    share = [
        np.sum(sums_and_counts[i], axis=axis) / np.sum(sums_and_counts[i + 1], axis=axis)
        for i in range(0, len(sums_and_counts), 2)
    ]
    first_on_first, first_on_second, second_on_first, second_on_second = share
    return (first_on_first - second_on_first) - (first_on_second - second_on_second)
