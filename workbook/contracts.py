"""Notebook 06's experiment: the same questions against two tool contracts, judged by hallucinations_v1,
the trajectory metric and the reference metric; per-sentence verdicts; the computed finding (F10)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

import difflib
import json
import re

from workbook.evals import run_eval
from workbook.findings import arm_results, describe_arms, verdict
from workbook.pit_wall import CONTRACTS, build_pit_wall

CONTRACT_EVALSET, CONTRACT_CONFIG = "pit_wall", "pit_wall_contract"
NO_TOOL_EVALSET = "pit_wall_no_tools"
HALLUCINATIONS = "hallucinations_v1"
PREDICTED_LOWER = "gap"  # the write-up: a gap in the tool's output invites an unsupported sentence


def contract_runs(repeats: int, agent_model: str, judge_model: str, case_ids: list[str] | None = None) -> pd.DataFrame:
    """Return the run tables of both contracts (column `arm`: gap or closed), one run each."""
    import pandas as pd

    tables = [contract_run(c, repeats, agent_model, judge_model, case_ids) for c in CONTRACTS]
    return pd.concat(tables, ignore_index=True)


def contract_run(
    contract: str, repeats: int, agent_model: str, judge_model: str, case_ids: list[str] | None = None
) -> pd.DataFrame:
    """Return one contract's run table (column `arm`): the contract evalset's cases (or those in
    `case_ids`) `repeats` times, every metric of the contract config judged; written to
    outputs/runs/pit_wall-<contract>."""
    table = run_eval(
        build_pit_wall(contract, model=agent_model),
        CONTRACT_EVALSET,
        CONTRACT_CONFIG,
        repeats=repeats,
        prompt_version=f"{contract} contract",
        run_id=f"pit_wall-{contract}",
        judge_model=judge_model,
        show_findings=False,
        case_ids=case_ids,
    )
    return table.assign(arm=contract)


def contract_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Return, per contract and metric, how many judged answers passed and the mean score."""
    judged = runs[runs["status"].isin(["PASSED", "FAILED"])]
    per_answer = judged.drop_duplicates(["arm", "metric", "case", "repeat"])
    summary = per_answer.groupby(["metric", "arm"], sort=False).agg(
        answers=("case", "size"), passed=("status", lambda s: int(s.eq("PASSED").sum())), mean_score=("score", "mean")
    )
    return summary.round(2).unstack("arm")


def sentence_verdicts(runs: pd.DataFrame) -> pd.DataFrame:
    """Return one row per sentence the hallucinations_v1 judge labelled: contract, case, repeat, sentence,
    label and the judge's rationale (ADK itself keeps only the score)."""
    import pandas as pd

    rows = []
    judged = runs[(runs["metric"] == HALLUCINATIONS) & runs["sentence_labels"].notna()]
    for row in judged.itertuples():
        for number, label in enumerate(json.loads(row.sentence_labels), start=1):
            rows.append({"arm": row.arm, "case": row.case, "repeat": row.repeat, "sentence_no": number, **label})
    return pd.DataFrame(rows, columns=["arm", "case", "repeat", "sentence_no", "sentence", "label", "rationale"])


def unjudged_text(runs: pd.DataFrame) -> pd.DataFrame:
    """Return, per hallucinations_v1 answer, the answer text that none of its segmented sentences holds.

    ADK scores only the sentences its segmenter wrote out, so words the segmenter dropped are never judged
    (e.g. the clause of a sentence cut at a comma). Columns arm, case, repeat, score (ADK's), answer and
    unjudged ("" when every word was judged)."""
    import pandas as pd

    rows = []
    judged = runs[(runs["metric"] == HALLUCINATIONS) & runs["sentence_labels"].notna()]
    for row in judged.drop_duplicates(["arm", "case", "repeat"]).itertuples():
        segmented = " ".join(label["sentence"] for label in json.loads(row.sentence_labels))
        unjudged = _words_missing(str(row.answer), segmented)
        rows.append(
            {"arm": row.arm, "case": row.case, "repeat": row.repeat, "score": row.score, "answer": row.answer}
            | {"unjudged": unjudged}
        )
    return pd.DataFrame(rows, columns=["arm", "case", "repeat", "score", "answer", "unjudged"])


def _words_missing(answer: str, segmented: str) -> str:
    # Word by word, since a segmenter may also re-punctuate what it keeps ("Prix, with ..." -> "Prix.").
    words, kept = _WORD.findall(answer), _WORD.findall(segmented)
    matcher = difflib.SequenceMatcher(a=words, b=kept, autojunk=False)
    return " ".join(" ".join(words[i1:i2]) for op, i1, i2, _, _ in matcher.get_opcodes() if op in ("delete", "replace"))


_WORD = re.compile(r"[\w'’-]+(?:[.,]\d+)*")


def tool_trajectories(runs: pd.DataFrame) -> pd.DataFrame:
    """Return, per contract, case and repeat, the tools the agent called (from the trajectory metric's
    rows) beside the answer it gave."""
    rows = runs[runs["metric"] == "tool_trajectory_avg_score"]
    return rows[["arm", "case", "repeat", "tools_called", "score", "answer"]].reset_index(drop=True)


def contract_finding(runs: pd.DataFrame) -> dict:
    """Return F10's findings row: the share of answers hallucinations_v1 passes under each contract, and
    the verdict computed as for every finding (predicted arm lower and Fisher's exact p < 0.05)."""
    judged = runs[runs["metric"] == HALLUCINATIONS]
    arms = arm_results(judged, "pass")
    outcome = verdict(arms, PREDICTED_LOWER)
    return {
        "finding": "F10",
        "title": "A tool output that does not explain its numbers invites an unsupported sentence",
        "varied": "tool contract of get_race_results: gap vs closed (same questions, instruction and models)",
        "arms": describe_arms(arms, "hallucinations_v1 pass"),
        **outcome,
        "evidence": "runs "
        + ", ".join(f"pit_wall-{arm}" for arm in CONTRACTS)
        + ": cases "
        + ", ".join(dict.fromkeys(judged["case"])),
    }
