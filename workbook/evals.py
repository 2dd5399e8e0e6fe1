"""Running an eval (notebooks 02 and 04): inference, judging and tabulating, inside one call log."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from google.adk.agents import LlmAgent
    from google.adk.evaluation.eval_config import EvalConfig
    from google.adk.evaluation.eval_set import EvalSet

from pathlib import Path
from typing import Literal

from workbook.adk_files import CollectedResults, save_eval_history
from workbook.cassettes import call_log
from workbook.evalfiles import (
    CONFIGS,
    EVALSETS,
    judge_options,
    load_eval_config,
    load_evalset,
    source_record,
    with_judge,
)
from workbook.failures import OnError, run_counts, settle_failures, summary_line
from workbook.inference import agent_inferences, eval_service, frozen_inference
from workbook.judging import judge_inferences
from workbook.lint import findings_table, lint_evalset, stop_on_lint_errors
from workbook.runs import provenance, run_table, write_run
from workbook.runscope import replay_scope
from workbook.util import now, run_sync, show, timestamp


def run_eval(
    agent: LlmAgent,
    evalset: str | Path | EvalSet,
    config: str | Path | EvalConfig | list,
    repeats: int = 1,
    prompt_version: str = "",
    run_id: str | None = None,
    parallelism: int = 1,
    show_findings: bool = True,
    case_ids: list[str] | None = None,
    judge_model: str | None = None,
    judge_samples: int | None = None,
    on_error: OnError = "raise",
    on_lint_error: Literal["stop", "warn"] = "stop",
) -> pd.DataFrame:
    """Return the tidy run table of an ADK eval: agent inference `repeats` times, every metric judged.

    One row per (repeat, case, invocation, metric, judge, sample), with every judge sample's raw
    reply and parsed verdict (ADK itself keeps only the winning sample). `judge_model` and
    `judge_samples` replace every LLM-judged metric's judge and num_samples (None keeps the config's).
    Writes the table and a meta.json under outputs/runs/<run_id>/, prints a one-line summary, and writes
    ADK's own EvalSetResult into the agent's eval history (agents/<agent name>/.adk/eval_history), where
    `adk web` lists it.

    Lint errors stop the run before any model call (on_lint_error="warn" runs anyway); warnings
    are shown. The run is one replay scope: calling it twice replays the same recordings. A failed
    answer, judge call or replay miss raises IncompleteRunError naming each case and metric;
    on_error="keep" keeps those results as rows with status ERROR, with a warning.
    """
    evalset_obj, config_obj = load_evalset(evalset), with_judge(config, judge_model, judge_samples)
    findings = lint_evalset(evalset_obj, config_obj, agent_model=agent.model)
    if show_findings and findings:
        show(
            findings_table(findings), f"The linter found {len(findings)} thing(s) to look at before trusting this eval:"
        )
    if on_lint_error == "stop":
        stop_on_lint_errors(findings, evalset, config)
    run_id = run_id or f"{evalset_obj.eval_set_id}-{prompt_version or 'agent'}-{timestamp()}"
    started = now()
    adk_results = CollectedResults()
    service = eval_service(agent, evalset_obj, adk_results)

    async def infer_and_judge(calls, failures):
        inferences = await agent_inferences(service, evalset_obj, repeats, parallelism, case_ids)
        return await judge_inferences(service, inferences, config_obj, calls, failures)

    with replay_scope(run_id) as scope, call_log() as calls:
        first_failure = len(scope.failures)
        rows = run_sync(infer_and_judge(calls, scope.failures))
    table = run_table(rows, run_id, agent.model, prompt_version)
    settle_failures(table, scope.failures[first_failure:], on_error, f"run_eval {run_id}")
    evalset_name, evalset_sha = source_record(evalset, EVALSETS, ".evalset.json")
    parts = [source_record(part, CONFIGS, ".json") for part in (config if isinstance(config, list) else [config])]
    meta = {
        "run_id": run_id,
        "evalset": evalset_name,
        "evalset_sha256": evalset_sha,
        "config": [name for name, _ in parts] if isinstance(config, list) else parts[0][0],
        "config_sha256": [digest for _, digest in parts],
        "agent_model": agent.model,
        "judge_models": judge_models(config_obj),
        "prompt_version": prompt_version,
        "repeats": repeats,
        **provenance(),
        "lint_findings": len(findings),
        **run_counts(table),
        "started": started,
        "ended": now(),
        "adk_eval_set_result": save_eval_history(adk_results, evalset_obj.eval_set_id, app_name=agent.name),
    }
    write_run(table, meta)
    print(summary_line(run_id, table))
    return table


def judge_models(config: EvalConfig) -> list[str]:
    """Return the judge models of a config's LLM-judged metrics (a trajectory or ROUGE metric has none)."""
    options = (judge_options(criterion) or {} for criterion in (config.criteria or {}).values())
    return sorted({str(option["judge_model"]) for option in options if option.get("judge_model")})


def judge_frozen(
    answers: pd.DataFrame,
    evalset: str | Path | EvalSet,
    config: str | Path | EvalConfig | list,
    repeats: int = 1,
    run_id: str = "",
    judge_label: str = "",
) -> tuple[pd.DataFrame, list[dict]]:
    """Return (run table, failures noted) for frozen answers re-judged by `config`, without raising.

    Results whose judge calls failed are rows with status ERROR; `judge_answers` and `judge_panel`
    decide what to do with them.
    """
    evalset_obj, config_obj = load_evalset(evalset), load_eval_config(config)
    results = [frozen_inference(evalset_obj, row) for row in answers.itertuples()]
    service = eval_service(None, evalset_obj)
    inferences = [(repeat, result) for repeat in range(repeats) for result in results]
    with replay_scope(run_id or "judge_answers") as scope, call_log() as calls:
        first_failure = len(scope.failures)
        rows = run_sync(judge_inferences(service, inferences, config_obj, calls, scope.failures))
    table = run_table(rows, run_id, answers["agent_model"].iloc[0] if "agent_model" in answers else "", "")
    if judge_label:
        table["judge"] = judge_label
    return table, scope.failures[first_failure:]


def judge_answers(
    answers: pd.DataFrame,
    evalset: str | Path | EvalSet,
    config: str | Path | EvalConfig | list,
    repeats: int = 1,
    run_id: str = "",
    judge_label: str = "",
    on_error: OnError = "raise",
) -> pd.DataFrame:
    """Return the run table for frozen answers (columns case, user, answer) re-judged by `config`.

    Nothing is asked of the agent, so any variation between repeats is the judge's alone.
    `evalset` and `config` take every form `run_eval` takes. A failed judge call or replay miss
    raises IncompleteRunError (on_error="keep": rows with status ERROR, and a warning).
    """
    table, failures = judge_frozen(answers, evalset, config, repeats, run_id, judge_label)
    settle_failures(table, failures, on_error, f"judge_answers {run_id}".strip())
    print(summary_line(run_id or "judge_answers", table))
    return table
