"""The judge-vs-labels set (notebook 04): each labelled answer with a judge's samples on it, blind label
and adjudication side by side."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

from workbook.labels import ANSWER_KEY, read_labels
from workbook.util import text_digest


def labelled_answers(table: pd.DataFrame, battery: str, judge: str, prompt_version: str, source: str) -> pd.DataFrame:
    """Return one row per distinct answer of run tables: source, case, answer digest, the judge's parsed
    samples on it (pooled over runs and repeats), score (their pass share), and its labels in `battery`:
    blind (1/0, NaN where unlabelled) and adjudicated (1/0, NaN where no adjudication)."""
    rows = table[(table["judge"] == judge) & table["sample_verdict"].isin(["pass", "fail"])]
    rows = rows.assign(
        conversation=rows["case"],
        turn=rows["invocation"].astype(int),  # invocations count from 1, as turns do
        prompt_version=prompt_version,
        model=rows["agent_model"],
        answer_digest=rows["answer"].map(text_digest),
        passed=rows["sample_verdict"].eq("pass"),
    )
    scored = rows.groupby(ANSWER_KEY, sort=False)["passed"].agg(samples="size", score="mean").reset_index()
    labels = read_labels(battery)
    labels = labels[labels["verdict"] != ""][[*ANSWER_KEY, "verdict", "adjudicated_verdict"]]
    merged = scored.merge(labels, on=ANSWER_KEY, how="left")
    return merged.assign(
        source=source,
        case=merged["conversation"],
        blind=merged["verdict"].map({"pass": 1, "fail": 0}),
        adjudicated=merged["adjudicated_verdict"].map({"pass": 1, "fail": 0}),
    )[["source", "case", "answer_digest", "samples", "score", "blind", "adjudicated"]]
