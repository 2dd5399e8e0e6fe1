"""ADK's own files, so ADK's tools see the workbook's work: `adk web agents` lists the workbook's
evalsets and every `run_eval` in its eval tab, next to the runs it made itself.

ADK's local managers (google-adk 2.13) look in the agent's own folder: eval sets are
`<agents>/<app>/<eval_set_id>.evalset.json`, eval history is `<agents>/<app>/.adk/eval_history/`.
data/evalsets stays the source of truth: the agent folder gets (git-ignored) links to it.
The agents folder is a setting (WORKBOOK_ADK_AGENTS, default agents/), so tests write elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.adk.evaluation.eval_result import EvalCaseResult, EvalSetResult

import contextlib
import os
from pathlib import Path

from google.adk.evaluation.eval_set_results_manager import EvalSetResultsManager

from workbook.settings import DATA, settings

APP_NAME = "lore_archivist"  # the agent package under agents/; also the app name of every run
EVALSET_SUFFIX = ".evalset.json"  # ADK's LocalEvalSetsManager lists files ending so


class CollectedResults(EvalSetResultsManager):
    """ADK's results-manager interface, kept in memory: LocalEvalService hands it every
    EvalCaseResult it makes, and `save_eval_history` writes them as one EvalSetResult per run."""

    def __init__(self) -> None:
        self.case_results: list[EvalCaseResult] = []

    def save_eval_set_result(self, app_name: str, eval_set_id: str, eval_case_results: list) -> None:
        self.case_results.extend(eval_case_results)

    def get_eval_set_result(self, app_name: str, eval_set_result_id: str) -> EvalSetResult:
        raise NotImplementedError("collected results are written by save_eval_history, not read back")

    def list_eval_set_results(self, app_name: str) -> list[str]:
        return []


def adk_agents_dir() -> Path:
    """Return the folder of ADK agent packages whose eval sets and eval history ADK's tools read."""
    return settings().workbook_adk_agents


def link_evalsets(agents_dir: str | Path | None = None, app_name: str = APP_NAME) -> list[Path]:
    """Return the links (made or already there) from the agent's folder to data/evalsets/*.evalset.json.

    Links, not copies: data/evalsets stays the one source, and a case `adk web` adds to a listed
    eval set lands in it. Links that point nowhere any more are removed; regular files are never touched.
    """
    folder = Path(agents_dir or adk_agents_dir()) / app_name
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(f"*{EVALSET_SUFFIX}"):
        if stale.is_symlink() and not stale.exists():
            stale.unlink(missing_ok=True)  # parallel report jobs may remove it at the same moment
    links = []
    for source in sorted((DATA / "evalsets").glob(f"*{EVALSET_SUFFIX}")):
        link, target = folder / source.name, os.path.relpath(source, folder)
        if link.is_symlink() and os.readlink(link) != target:
            link.unlink(missing_ok=True)
        if not link.exists() and not link.is_symlink():
            with contextlib.suppress(FileExistsError):  # another report job made it first
                link.symlink_to(target)
        links.append(link)
    return links


def save_eval_history(
    collected: CollectedResults, eval_set_id: str, agents_dir: str | Path | None = None, app_name: str = APP_NAME
) -> str:
    """Return the id of the EvalSetResult written to the app's eval history for one run ('' if nothing to write).

    ADK's LocalEvalSetResultsManager writes it, so `adk web` and ADK's readers take it as their own.
    The workbook judges one metric at a time; ADK's file has one case result per inference, so the
    metric results of one inference (case and repeat: one session) are merged as ADK merges them.
    """
    from google.adk.evaluation.local_eval_set_results_manager import LocalEvalSetResultsManager

    if not collected.case_results:
        return ""
    folder = Path(agents_dir or adk_agents_dir())
    link_evalsets(folder, app_name)
    manager = LocalEvalSetResultsManager(agents_dir=str(folder))
    before = set(manager.list_eval_set_results(app_name))
    merged = merge_case_results(collected.case_results)
    manager.save_eval_set_result(app_name, eval_set_id, merged)
    # ADK does not return the id; parallel report jobs may write beside us, so ours is the new file
    # holding our sessions (each inference has its own session id).
    sessions = {result.session_id for result in merged}
    for written in sorted(set(manager.list_eval_set_results(app_name)) - before):
        result = manager.get_eval_set_result(app_name, written)
        if {case.session_id for case in result.eval_case_results} == sessions:
            return written
    return ""


def merge_case_results(results: list[EvalCaseResult]) -> list[EvalCaseResult]:
    """Return one EvalCaseResult per inference (case and session), its metrics' results merged,
    with ADK's final status: failed if any metric failed, else passed if any passed, else not evaluated."""
    merged: dict[tuple[str, str], EvalCaseResult] = {}
    for result in results:
        key = (result.eval_id, result.session_id)
        if key not in merged:
            merged[key] = result.model_copy(deep=True)
            continue
        into = merged[key]
        into.overall_eval_metric_results += result.overall_eval_metric_results
        for mine, theirs in zip(
            into.eval_metric_result_per_invocation, result.eval_metric_result_per_invocation, strict=False
        ):
            mine.eval_metric_results += theirs.eval_metric_results
    for result in merged.values():
        result.final_eval_status = _final_status(result)
    return list(merged.values())


def _final_status(result: EvalCaseResult):
    from google.adk.evaluation.eval_metrics import EvalStatus

    if not result.overall_eval_metric_results:  # a failed inference: ADK says FAILED, with no metrics
        return result.final_eval_status
    statuses = {metric.eval_status for metric in result.overall_eval_metric_results}
    if EvalStatus.FAILED in statuses:
        return EvalStatus.FAILED
    return EvalStatus.PASSED if EvalStatus.PASSED in statuses else EvalStatus.NOT_EVALUATED
