"""The one module the notebooks import: the course's table of contents and where each piece lives.

Every name below is re-exported from the `workbook` package, one concern per module:

  notebook                   module                  names
  -------------------------  ----------------------  ---------------------------------------------------
  every notebook             workbook.settings       settings, refresh_settings, use_record_mode,
                                                     use_judge_format, outputs_dir, runs_dir,
                                                     the error types
                             workbook.models         describe_backend, LocalLlm, RecordedGemini
                             workbook.cassettes      call_log, reset_occurrences (record/replay)
                             workbook.runscope       replay_scope (identical calls replay in order per run)
                             workbook.util           run_sync
  01_build_the_archivist     workbook.agent          prompt_versions, load_prompt, prompt_diff,
                                                     prompt_overview, build_archivist, chat, ask_each,
                                                     side_by_side
                             workbook.models         supports_thinking
                             workbook.plots          plot_tokens
  02_rubric_vs_reference     workbook.evalfiles      load_evalset, load_eval_config, with_judge
  batch_eval_run             workbook.lint           lint_evalset, findings_table, Finding
                             workbook.evals          run_eval (inference -> judging -> run table)
                             workbook.eval_views     case_scores, metric_verdicts, disagreement_view,
                                                     defect_pairs, uniform_rubric_replies, judge_prompts
                             workbook.runs           RUN_COLUMNS, write_run, read_runs
                             workbook.plots          plot_case_scores
  03_manual_battery          workbook.battery        load_battery, run_battery, uncovered_failures,
                                                     promote_to_evalset
                             workbook.labels         FAILURE_KINDS, save_label, read_labels, with_labels
                             workbook.widget         LabellingWidget
                             workbook.plots          plot_failure_kinds
  02, 03, 04 (findings)      workbook.findings       finding_experiment, sample_rationales, finding_row,
                                                     promotion_finding, noise_finding_row, arm_results,
                                                     write_findings, read_findings,
                                                     load_frozen_answers, load_findings,
                                                     written_answers
  04_judge_disagreement      workbook.panel          judge_panel, triage_table, triage_items,
                                                     verdict_probabilities (P(yes) from log-probabilities)
                             workbook.judge_stats    wilson, bootstrap_ci, cluster_bootstrap,
                                                     paired_mcnemar, stability_curve, stable_k,
                                                     samples_for_stability, noise_split,
                                                     judge_health, calibrate_cv, fit_threshold
                             workbook.calibrated_findings  threshold_readings, threshold_sentences,
                                                     threshold_summary
                                                     (can a calibrated threshold show a finding?)
                             workbook.agreement      sample_verdicts, case_verdicts, flip_rates,
                                                     pairwise_kappa, panel_agreement, versus_truth,
                                                     pass_rates, kappa_ci
                             workbook.labels         scoreboard
                             workbook.label_sets     labelled_answers
                             workbook.bias_probes    judged_by_each, self_preference
                             workbook.plots          plot_flip_rates, plot_kappa_heatmap,
                                                     plot_pass_rates, plot_confusion, plot_stability,
                                                     plot_scores_by_label
  05_comparison_report       workbook.report_views   findings_headline, missing_findings_sentence,
                                                     grid_runs, versions_compared, judges_compared,
                                                     cost_by_judge, sample_design, judge_stability,
                                                     run_diff (RunDiff: any two runs of one evalset,
                                                     case by case), run_overview, version_pass_rates,
                                                     cost_by_version, scoreboard_from
                             workbook.plots          plot_version_pass_rates
  06_tool_contracts          workbook.pit_wall       build_pit_wall, CONTRACTS, tool_declarations,
                                                     response_schema_by_backend, tool_error_outcomes
                             workbook.race_data      InMemoryRaceData (the race-data source)
                             workbook.contracts      contract_runs, contract_summary, tool_trajectories,
                                                     sentence_verdicts, unjudged_text, contract_finding (F10)
  `make report`              workbook.grid_file      grid_jobs (the grid file, validated up front)
                             workbook.grid           run_grid, export_report, report_main
                             workbook.grid_dask      the grid's jobs as Dask tasks (local or a cluster)
  `make plan`                workbook.plan           plan_run, plan_summary, format_plan, plan_main

Behind them, rarely edited: workbook.weights (local model files), workbook.llama (the llama.cpp
engine), workbook.judge_formats (ADK's judge prompts and replies), workbook.inference and
workbook.judging (the two steps inside run_eval), workbook.adk_files (ADK's own eval-set and
eval-history files, so `adk web` lists the workbook's evalsets and runs), workbook.inputs (which data
files and recordings a report job read), workbook.planning (record mode `plan`), workbook.failures (what failed
inside a run).

Run `python -m helpers report` for what `make report` does, `python -m helpers plan` for what it would
call (`python -m helpers plan notebooks/02_rubric_vs_reference.ipynb -p repeats 3` for one notebook).
"""

# isort: off  (grouped by notebook, in course order)

# Every notebook: settings, record mode, model backends.
# Notebook 01: the archivist.
from workbook.agent import (
    ask_each,
    build_archivist,
    chat,
    load_prompt,
    prompt_diff,
    prompt_overview,
    prompt_versions,
    side_by_side,
)
from workbook.agreement import (
    case_verdicts,
    flip_rates,
    kappa_ci,
    pairwise_kappa,
    panel_agreement,
    pass_rates,
    sample_verdicts,
    versus_truth,
)

# Notebook 03: the battery, labels, the labelling widget.
from workbook.battery import load_battery, promote_to_evalset, run_battery, uncovered_failures
from workbook.bias_probes import judged_by_each, self_preference
from workbook.calibrated_findings import threshold_readings, threshold_sentences, threshold_summary
from workbook.cassettes import call_log, reset_occurrences

# Notebook 06: the Pit Wall agent and the tool-contract experiment.
from workbook.contracts import (
    contract_finding,
    contract_runs,
    contract_summary,
    sentence_verdicts,
    tool_trajectories,
    unjudged_text,
)
from workbook.eval_views import (
    case_scores,
    defect_pairs,
    disagreement_view,
    judge_prompts,
    metric_verdicts,
    uniform_rubric_replies,
)

# Notebook 02 and batch_eval_run: evals, the linter, run tables.
from workbook.evalfiles import load_eval_config, load_evalset, with_judge
from workbook.evals import judge_answers, run_eval

# Notebooks 02-04: the findings as controlled experiments.
from workbook.findings import (
    arm_results,
    finding_experiment,
    finding_row,
    load_findings,
    load_frozen_answers,
    noise_finding_row,
    promotion_finding,
    read_findings,
    sample_rationales,
    write_findings,
    written_answers,
)

# `make report`: the papermill grid and the HTML report.
from workbook.grid import KERNEL_NAME, export_report, report_main, run_grid
from workbook.grid_file import grid_jobs
from workbook.judge_stats import (
    bootstrap_ci,
    calibrate_cv,
    cluster_bootstrap,
    fit_threshold,
    judge_health,
    noise_split,
    paired_mcnemar,
    samples_for_stability,
    stability_curve,
    stable_k,
    wilson,
)
from workbook.label_sets import labelled_answers
from workbook.labels import FAILURE_KINDS, read_labels, save_label, scoreboard, with_labels
from workbook.lint import Finding, findings_table, lint_evalset
from workbook.models import LocalLlm, RecordedGemini, describe_backend, supports_thinking

# Notebook 04: the judge panel, agreement statistics, triage.
from workbook.panel import judge_panel, triage_items, triage_table, verdict_probabilities
from workbook.pit_wall import (
    CONTRACTS,
    build_pit_wall,
    response_schema_by_backend,
    tool_declarations,
    tool_error_outcomes,
)
from workbook.plan import format_plan, plan_main, plan_run, plan_summary
from workbook.plots import (
    plot_case_scores,
    plot_confusion,
    plot_failure_kinds,
    plot_flip_rates,
    plot_kappa_heatmap,
    plot_pass_rates,
    plot_scores_by_label,
    plot_stability,
    plot_tokens,
    plot_version_pass_rates,
)

# Notebook 05: the comparison report.
from workbook.race_data import InMemoryRaceData
from workbook.report_views import (
    RunDiff,
    cost_by_judge,
    cost_by_version,
    findings_headline,
    grid_runs,
    judge_stability,
    judges_compared,
    missing_findings_sentence,
    run_diff,
    run_overview,
    sample_design,
    scoreboard_from,
    version_pass_rates,
    versions_compared,
)
from workbook.runs import RUN_COLUMNS, read_runs, write_run
from workbook.runscope import replay_scope
from workbook.settings import (
    BatteryError,
    CredentialsError,
    EvalFileError,
    EvalLintError,
    GridFileError,
    GridRunError,
    IncompleteRunError,
    LabelFileError,
    MissingModelError,
    ReplayMissError,
    WorkbookError,
    labels_dir,
    outputs_dir,
    refresh_settings,
    runs_dir,
    settings,
    use_judge_format,
    use_record_mode,
)
from workbook.util import run_sync
from workbook.widget import LabellingWidget

# isort: on

__all__ = [
    # every notebook
    "BatteryError",
    "CredentialsError",
    "EvalFileError",
    "GridFileError",
    "GridRunError",
    "LabelFileError",
    "EvalLintError",
    "IncompleteRunError",
    "MissingModelError",
    "ReplayMissError",
    "WorkbookError",
    "labels_dir",
    "outputs_dir",
    "refresh_settings",
    "runs_dir",
    "settings",
    "use_judge_format",
    "use_record_mode",
    "LocalLlm",
    "RecordedGemini",
    "describe_backend",
    "call_log",
    "reset_occurrences",
    "replay_scope",
    "run_sync",
    # 01
    "ask_each",
    "build_archivist",
    "chat",
    "load_prompt",
    "prompt_diff",
    "prompt_overview",
    "prompt_versions",
    "side_by_side",
    "plot_tokens",
    "supports_thinking",
    # 02, batch_eval_run
    "load_eval_config",
    "load_evalset",
    "with_judge",
    "Finding",
    "findings_table",
    "lint_evalset",
    "run_eval",
    "judge_answers",
    # findings (notebooks 02-04)
    "arm_results",
    "finding_experiment",
    "finding_row",
    "promotion_finding",
    "load_findings",
    "load_frozen_answers",
    "noise_finding_row",
    "read_findings",
    "sample_rationales",
    "write_findings",
    # design-aware judge statistics (notebook 04)
    "bootstrap_ci",
    "calibrate_cv",
    "cluster_bootstrap",
    "fit_threshold",
    "threshold_readings",
    "threshold_sentences",
    "threshold_summary",
    "judge_health",
    "noise_split",
    "paired_mcnemar",
    "samples_for_stability",
    "stability_curve",
    "stable_k",
    "wilson",
    "case_scores",
    "defect_pairs",
    "disagreement_view",
    "judge_prompts",
    "metric_verdicts",
    "uniform_rubric_replies",
    "RUN_COLUMNS",
    "read_runs",
    "write_run",
    "plot_case_scores",
    # 03
    "load_battery",
    "promote_to_evalset",
    "run_battery",
    "uncovered_failures",
    "FAILURE_KINDS",
    "read_labels",
    "save_label",
    "with_labels",
    "LabellingWidget",
    "plot_failure_kinds",
    # 04
    "judge_panel",
    "triage_items",
    "triage_table",
    "verdict_probabilities",
    "case_verdicts",
    "judged_by_each",
    "self_preference",
    "flip_rates",
    "kappa_ci",
    "pairwise_kappa",
    "panel_agreement",
    "pass_rates",
    "sample_verdicts",
    "versus_truth",
    "scoreboard",
    "labelled_answers",
    "written_answers",
    "plot_confusion",
    "plot_scores_by_label",
    "plot_flip_rates",
    "plot_kappa_heatmap",
    "plot_pass_rates",
    "plot_stability",
    # 05
    "RunDiff",
    "cost_by_judge",
    "cost_by_version",
    "findings_headline",
    "grid_runs",
    "judges_compared",
    "missing_findings_sentence",
    "judge_stability",
    "run_diff",
    "run_overview",
    "sample_design",
    "scoreboard_from",
    "version_pass_rates",
    "versions_compared",
    "plot_version_pass_rates",
    # 06
    "CONTRACTS",
    "InMemoryRaceData",
    "build_pit_wall",
    "contract_finding",
    "contract_runs",
    "contract_summary",
    "response_schema_by_backend",
    "sentence_verdicts",
    "tool_declarations",
    "tool_error_outcomes",
    "tool_trajectories",
    "unjudged_text",
    # make report
    "KERNEL_NAME",
    "export_report",
    "grid_jobs",
    "report_main",
    "run_grid",
    # make plan
    "format_plan",
    "plan_main",
    "plan_run",
    "plan_summary",
]

if __name__ == "__main__":
    import sys

    commands = {"report": report_main, "plan": plan_main}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        raise SystemExit(
            "usage: python -m helpers report [grid.yaml] | plan [grid.yaml | notebook.ipynb -p NAME VALUE ...]"
        )
    commands[sys.argv[1]](sys.argv[2:])
