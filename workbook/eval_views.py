"""What notebook 02 reads from a run table: per-case scores, metric verdicts, defects, judge prompts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from pandas.io.formats.style import Styler

from workbook.cassettes import CallLog
from workbook.evalfiles import METRIC_KINDS
from workbook.judge_formats import last_prompt
from workbook.util import wrapped


def case_scores(table: pd.DataFrame) -> pd.DataFrame:
    """Return one row per (case, metric) with the ADK score and status (first repeat)."""
    first = table[table["repeat"] == table["repeat"].min()]
    return first.drop_duplicates(["case", "invocation", "metric"])[["case", "metric", "score", "status", "threshold"]]


def metric_verdicts(table: pd.DataFrame) -> pd.DataFrame:
    """Return one row per case: each metric's status, named 'reference' / 'rubric' / ... (first repeat)."""
    scores = case_scores(table)
    scores = scores.assign(kind=scores["metric"].map(METRIC_KINDS))
    return scores.pivot_table(index="case", columns="kind", values="status", aggfunc="first", sort=False)


def disagreement_view(table: pd.DataFrame, cases: Iterable[str]) -> Styler:
    """Return, per case and metric, the answer, the reference and every judge sample's verdict and rationale."""
    rows = table[table["case"].isin(list(cases)) & (table["repeat"] == table["repeat"].min())]
    return wrapped(rows[["case", "metric", "sample", "sample_verdict", "rationale", "answer", "reference"]])


DEFECT_PAIRS = {
    "rubric demands more than the question": ("defect_overdemanding_rubric", "defect_overdemanding_fixed"),
    "wrong reference fact": ("defect_wrong_reference", "defect_wrong_reference_fixed"),
    "metric used outside its design": ("defect_knowledge_rubric", None),
    "contradictory rules": ("defect_contradictory_rules", "defect_contradictory_fixed"),
}


def defect_pairs(table: pd.DataFrame) -> pd.DataFrame:
    """Return one row per eval defect: each metric's status on the defective case and on its fix."""
    import pandas as pd

    verdicts = metric_verdicts(table)
    rows = []
    for defect, (before, after) in DEFECT_PAIRS.items():
        for kind in verdicts.columns:
            rows.append(
                {
                    "defect": defect,
                    "metric": kind,
                    "before": verdicts.loc[before, kind] if before in verdicts.index else "",
                    "after the fix": verdicts.loc[after, kind] if after in verdicts.index else "(see below)",
                }
            )
    return pd.DataFrame(rows).set_index(["defect", "metric"])


def uniform_rubric_replies(table: pd.DataFrame) -> int:
    """Return how many rubric judge replies gave every rubric the same verdict (all yes or all no)."""
    verdicts = table["rubric_verdicts"].dropna().map(lambda text: set(text.split(",")))
    return int((verdicts.map(len) == 1).sum())


def judge_prompts(calls: CallLog) -> list[str]:
    """Return the text of every judge prompt in a call log (open one with `call_log()` around a run)."""
    return [last_prompt(call["request"]) for call in calls if call.get("phase") == "judge"]
