"""The judge-vs-labels set (notebook 04): each labelled answer with a judge's samples on it, blind label
and adjudication side by side."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

from workbook.labels import ANSWER_KEY, read_labels
from workbook.settings import DATA, WorkbookError
from workbook.util import text_digest

WRITTEN = DATA / "answers" / "final_written.yaml"


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


def written_answers(evalset: str = "final", path: Path = WRITTEN) -> pd.DataFrame:
    """Return the maintainers' written answers (case, user, answer) to an evalset's single-turn questions,
    ready for judge_answers; the questions come from the evalset itself."""
    import pandas as pd
    import yaml

    from workbook.evalfiles import load_evalset
    from workbook.inputs import note_read

    note_read(path)  # a report job reruns when the written answers change
    items = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("answers") or []
    questions = {
        case.eval_id: case.conversation[0].user_content.parts[0].text for case in load_evalset(evalset).eval_cases
    }
    unknown = [item.get("case") for item in items if item.get("case") not in questions]
    if unknown or not items:
        raise WorkbookError(f"{path}: no answers, or cases not in evalset {evalset!r}: {unknown}")
    frame = pd.DataFrame(items)[["case", "answer"]]
    return frame.assign(user=frame["case"].map(questions))
