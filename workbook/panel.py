"""The judge panel and triage (notebook 04): frozen answers re-judged by several judges, disagreements
picked out for a person to decide."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from google.adk.evaluation.eval_case import EvalCase
    from google.adk.evaluation.eval_set import EvalSet

from google.genai import types

from workbook.agreement import case_verdicts
from workbook.evals import judge_frozen
from workbook.failures import OnError, run_counts, settle_failures, summary_line
from workbook.runs import provenance, write_run
from workbook.runscope import replay_scope
from workbook.util import now, text_digest


def answers_evalset(answers: pd.DataFrame, eval_set_id: str = "frozen_answers") -> EvalSet:
    """Return an in-memory ADK EvalSet whose cases are the given answers' questions and references.

    `answers` needs columns case, user and reference (for the battery, the expectation).
    """
    from google.adk.evaluation.eval_set import EvalSet

    cases = [single_turn_case(row.case, row.user, reference=row.reference) for row in answers.itertuples()]
    return EvalSet(eval_set_id=eval_set_id, eval_cases=cases)


def single_turn_case(case_id: str, user: str, reference: str | None = None, rubrics: list | None = None) -> EvalCase:
    """Return an ADK EvalCase of one user turn, with an optional reference answer and per-case rubrics."""
    from google.adk.evaluation.eval_case import EvalCase, Invocation

    invocation = Invocation(
        user_content=types.Content(role="user", parts=[types.Part(text=user)]),
        final_response=types.Content(role="model", parts=[types.Part(text=reference)]) if reference else None,
        rubrics=rubrics,
    )
    return EvalCase(eval_id=case_id, conversation=[invocation])


def judge_panel(
    answers: pd.DataFrame,
    judges: list[str],
    samples: int = 3,
    repeats: int = 2,
    run_id: str = "panel",
    threshold: float = 0.5,
    on_error: OnError = "raise",
) -> pd.DataFrame:
    """Return the tidy run table of frozen answers re-judged by every judge, `samples` x `repeats` times.

    Judges are model names, judged with final_response_match_v2 (sampled at the model's default
    temperature, seeds recorded), or "rouge" for ADK's non-LLM response_match_score baseline.
    The panel is one replay scope. A failed judge call or replay miss raises IncompleteRunError
    listing every judge's affected cases (on_error="keep": rows with status ERROR, and a warning).
    """
    import pandas as pd
    from google.adk.evaluation.eval_config import EvalConfig

    evalset = answers_evalset(answers)
    started, tables, failures = now(), [], []
    with replay_scope(run_id):
        for judge in judges:
            if judge == "rouge":
                criteria = {"response_match_score": threshold}
            else:
                options = {"judge_model": judge, "num_samples": samples}
                criteria = {"final_response_match_v2": {"threshold": threshold, "judge_model_options": options}}
            config = EvalConfig(criteria=criteria)
            table, noted = judge_frozen(answers, evalset, config, repeats=repeats, run_id=run_id, judge_label=judge)
            tables.append(table)
            failures += noted
    panel = pd.concat(tables, ignore_index=True)
    settle_failures(panel, failures, on_error, f"judge_panel {run_id}")
    meta = {
        "run_id": run_id,
        "kind": "judge_panel",
        "judge_models": judges,
        "agent_model": panel["agent_model"].iloc[0],
        "answers": len(answers),
        "samples": samples,
        "repeats": repeats,
        **provenance(),
        **run_counts(panel),
        "started": started,
        "ended": now(),
    }
    write_run(panel, meta)
    print(summary_line(run_id, panel))
    return panel


def verdict_probabilities(
    answers: pd.DataFrame,
    judge: str,
    run_id: str,
    evalset: str | EvalSet | None = None,
    only: pd.DataFrame | None = None,
    top_tokens: int = 5,
) -> pd.DataFrame:
    """Return P(yes) per frozen answer (columns case, answer_digest, p_yes): the reference judge's
    probability of "valid" at its verdict token, from one temperature-0 call with log-probabilities on.

    A continuous score that a threshold can be calibrated on, where a handful of sampled verdicts give
    only a few steps. Local models report llama.cpp's log-probabilities; Gemini its logprobs_result.
    `evalset` None: one made from the answers' case, user and reference columns. `only` (columns case
    and answer_digest, e.g. a label set) limits the calls to those answers.
    """
    from google.adk.evaluation.eval_config import EvalConfig

    from workbook.evals import judge_answers

    judged_once = {"temperature": 0, "response_logprobs": True, "logprobs": top_tokens}
    options = {"judge_model": judge, "num_samples": 1, "judge_model_config": judged_once}
    config = EvalConfig(criteria={"final_response_match_v2": {"threshold": 0.5, "judge_model_options": options}})
    unique = answers.assign(answer_digest=answers["answer"].map(text_digest)).drop_duplicates(["case", "answer_digest"])
    if only is not None:
        unique = unique.merge(only[["case", "answer_digest"]].drop_duplicates(), on=["case", "answer_digest"])
    table = judge_answers(unique, evalset or answers_evalset(unique), config, run_id=run_id)
    table = table.assign(answer_digest=table["answer"].map(text_digest))
    return table[["case", "answer_digest", "p_yes"]].reset_index(drop=True)  # NaN where no log-probabilities came


_TRIAGE_FIXED = ("case", "answer", "reference", "human", "designated judge's rationale")


def triage_table(panel: pd.DataFrame, answers: pd.DataFrame, designated_judge: str) -> pd.DataFrame:
    """Return the answers worth a second look: the designated judge disagrees with the human
    label, or the LLM judges split. Each row shows the answer, reference, label and every verdict."""
    import pandas as pd

    verdicts = case_verdicts(panel, repeat=0)
    llm = [judge for judge in verdicts.columns if judge != "rouge"]
    by_case = answers.set_index("case")
    human = by_case["verdict"]
    rationale = (
        panel[(panel["judge"] == designated_judge) & (panel["repeat"] == 0) & (panel["sample"] == 0)]
        .set_index("case")["rationale"]
        .to_dict()
    )
    rows = []
    for case in verdicts.index:
        label = human.get(case, "")
        designated = "pass" if verdicts.loc[case, designated_judge] else "fail"
        split = verdicts.loc[case, llm].nunique() > 1
        if not split and (not label or label == designated):
            continue
        answer = by_case.loc[case]
        rows.append(
            {
                "case": case,
                "answer": answer["answer"],
                "reference": answer["reference"],
                "human": label or "(unlabelled)",
                **{j.removeprefix("local/"): "pass" if verdicts.loc[case, j] else "fail" for j in verdicts.columns},
                "designated judge's rationale": rationale.get(case, ""),
            }
        )
    return pd.DataFrame(rows)


def triage_items(triage: pd.DataFrame, prompt_version: str) -> pd.DataFrame:
    """Return triage rows in the shape LabellingWidget expects (one item per disagreement)."""
    verdict_columns = [c for c in triage.columns if c not in _TRIAGE_FIXED]
    return triage.assign(
        conversation=triage["case"],
        turn=1,
        group="triage",
        user=triage["case"],
        expect=triage.apply(
            lambda row: (
                f"reference: {row['reference']} | human: {row['human']} | "
                + ", ".join(f"{c}: {row[c]}" for c in verdict_columns)
            ),
            axis=1,
        ),
        model="panel",
        prompt_version=prompt_version,
        answer_digest=triage["answer"].map(text_digest),
    )
