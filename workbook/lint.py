"""The evalset linter (notebook 02): a list of rules, each one trap an evalset + config pair can fall into.

To add a rule, write a function returning a list of Findings and append it to the list it belongs
to: METRIC_RULES (one config criterion), RUBRIC_RULES (one rubric text, from the config or a case)
or CASE_RULES (one eval case). Rules run in list order, so findings keep a stable order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from google.adk.evaluation.eval_case import EvalCase
    from google.adk.evaluation.eval_config import EvalConfig
    from google.adk.evaluation.eval_metrics import MetricInfo
    from google.adk.evaluation.eval_set import EvalSet

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from workbook.evalfiles import (
    CONFIGS,
    EVALSETS,
    adk_evaluator,
    adk_metrics,
    criterion_fields,
    data_file,
    load_eval_config,
    load_evalset,
)
from workbook.settings import REPO, EvalLintError
from workbook.util import first_line


@dataclass
class Finding:
    """One problem the evalset linter found."""

    severity: Literal["error", "warning", "info"]
    where: str
    what: str
    fix: str


@dataclass(frozen=True)
class Metric:
    """One config criterion as the metric rules see it, with what ADK's registry says about it."""

    name: str
    fields: dict  # the criterion as a dict (see evalfiles.criterion_fields)
    where: str
    agent_model: str | None
    info: MetricInfo | None = None  # ADK's MetricInfo; None: ADK has no such metric
    rejected: str = ""  # why ADK refuses to build its evaluator from this criterion ("" if it accepts it)
    majority_voted: bool = False  # an LLM judge whose samples ADK majority-votes (a tie fails)
    rubric_based: bool = False
    custom: bool = False  # defined by the config's custom_metrics (registered by ADK when the eval runs)


@dataclass(frozen=True)
class Context:
    """What the case rules need to know about the config."""

    has_rubric_metric: bool
    config_rubric_ids: set[str]
    in_order_trajectory: bool


def lint_evalset(
    evalset: str | Path | EvalSet, config: str | Path | EvalConfig | list, agent_model: str | None = None
) -> list[Finding]:
    """Return the traps an evalset + config pair falls into, before any model is called.

    Takes every form `run_eval` takes (names, paths, ADK objects, a list of config names).
    Metric names, value ranges and evaluator kinds come from ADK's own registry at run time.
    Checks ADK's silent behaviours (untyped per-case rubrics are dropped, ties fail) and the
    method's lessons (self-judging, rubrics that need lore a tool-less agent cannot evidence).
    The knowledge-rubric check is a keyword heuristic: it can miss cases and flag harmless ones.
    """
    evalset, config = load_evalset(evalset), load_eval_config(config)
    metrics = [adk_metric(config, name, agent_model) for name in config.criteria or {}]
    findings: list[Finding] = [finding for metric in metrics for rule in METRIC_RULES for finding in rule(metric)]
    context = _context(config, metrics)
    for case in evalset.eval_cases:
        findings += [finding for rule in CASE_RULES for finding in rule(case, context)]
    return findings


def adk_metric(config: EvalConfig, name: str, agent_model: str | None = None) -> Metric:
    """Return one config criterion with what ADK's registry says about it (no model is called)."""
    from google.adk.evaluation.llm_as_judge import LlmAsJudge
    from google.adk.evaluation.rubric_based_evaluator import RubricBasedEvaluator

    custom = name in (config.custom_metrics or {})
    info = adk_metrics().get(name)
    fields = criterion_fields(config.criteria[name])
    metric = Metric(name, fields, f"config criteria.{name}", agent_model, info, custom=custom)
    if info is None or custom or not info.requires_threshold:
        return metric
    try:
        evaluator = adk_evaluator(config, name)
    except Exception as error:  # ADK's own words on what the criterion lacks
        return replace(metric, rejected=first_line(error))
    return replace(
        metric,
        majority_voted=isinstance(evaluator, LlmAsJudge),
        rubric_based=isinstance(evaluator, RubricBasedEvaluator),
    )


def stop_on_lint_errors(
    findings: list[Finding], evalset: str | Path | EvalSet, config: str | Path | EvalConfig | list
) -> None:
    """Return None when no finding is an error; otherwise raise EvalLintError naming file, place and fix of each."""
    errors = [finding for finding in findings if finding.severity == "error"]
    if not errors:
        return
    lines = [f"  - {_file_of(f, evalset, config)}: {f.where}: {f.what}. Fix: {f.fix}" for f in errors]
    raise EvalLintError(
        f"{len(errors)} lint error(s) stop this eval before any model call:\n"
        + "\n".join(lines)
        + "\nFix them, or pass on_lint_error='warn' to run anyway (e.g. to watch what ADK does with them)."
    )


def _file_of(finding: Finding, evalset, config) -> str:
    if not finding.where.startswith("config"):
        return _source_name(evalset, EVALSETS, ".evalset.json")
    metric = finding.where.removeprefix("config criteria.").split(".")[0]
    for part in config if isinstance(config, list) else [config]:
        if metric in (load_eval_config(part).criteria or {}):
            return _source_name(part, CONFIGS, ".json")
    return _source_name(config, CONFIGS, ".json")


def _source_name(source, folder: Path, suffix: str) -> str:
    if isinstance(source, str | Path):
        path = data_file(source, folder, suffix)
        return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
    return "(in-memory " + type(source).__name__ + ")"


def findings_table(findings: list[Finding]) -> pd.DataFrame:
    """Return linter findings as a table, errors first."""
    import pandas as pd

    order = {"error": 0, "warning": 1, "info": 2}
    rows = sorted((vars(f) for f in findings), key=lambda row: order[row["severity"]])
    return pd.DataFrame(rows, columns=["severity", "where", "what", "fix"])


# ---- metric rules: one config criterion ------------------------------------------------------


def unknown_metric(metric: Metric) -> list[Finding]:
    """Return an error for a metric name ADK's registry does not have (and the config does not define)."""
    if metric.info is not None or metric.custom:
        return []
    import google.adk

    known = ", ".join(sorted(adk_metrics()))
    message = f"ADK {google.adk.__version__} has no metric named {metric.name!r}"
    return [Finding("error", metric.where, message, f"use one of ADK's metrics: {known}")]


def informational_metric(metric: Metric) -> list[Finding]:
    """Return an error for a metric ADK reports on every eval by itself and that takes no threshold."""
    if metric.info is None or metric.info.requires_threshold:
        return []
    message = f"{metric.name} is reported on every eval automatically and takes no threshold (ADK fails the eval)"
    return [Finding("error", metric.where, message, "remove it from criteria")]


def criterion_adk_rejects(metric: Metric) -> list[Finding]:
    """Return an error when ADK cannot build the metric's evaluator from this criterion."""
    if not metric.rejected:
        return []
    message = f"ADK rejects this criterion: {metric.rejected}"
    return [Finding("error", metric.where, message, "give the criterion the fields ADK's metric expects")]


def threshold_outside_range(metric: Metric) -> list[Finding]:
    """Return an error for a threshold outside the metric's value range (ADK's MetricInfo; [0, 1] for most)."""
    threshold = metric.fields.get("threshold")
    if metric.info is None or threshold is None:
        return []
    interval = metric.info.metric_value_info.interval if metric.info.metric_value_info else None
    low, high = (interval.min_value, interval.max_value) if interval else (0.0, 1.0)
    if isinstance(threshold, int | float) and not isinstance(threshold, bool) and low <= threshold <= high:
        return []
    message = f"threshold {threshold!r} is outside [{low:g}, {high:g}], the range of {metric.name}'s scores"
    return [Finding("error", metric.where, message, f"pick a threshold inside [{low:g}, {high:g}]")]


def judge_samples(metric: Metric) -> list[Finding]:
    """Return an error for num_samples < 1, and a warning for an even number of samples on a metric
    whose judge samples ADK majority-votes (a tie counts as a fail)."""
    options = metric.fields.get("judge_model_options")
    if options is None:
        return []
    samples = options.get("num_samples", 5)
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
        message = f"num_samples={samples!r}: the judge must be asked at least once"
        return [Finding("error", f"{metric.where}.judge_model_options", message, "use an odd number: 1, 3 or 5")]
    if metric.majority_voted and samples % 2 == 0:
        message = f"num_samples={samples} is even: ADK majority-votes the samples and a tie counts as a fail"
        return [Finding("warning", f"{metric.where}.judge_model_options", message, "use an odd number of samples")]
    return []


def self_judge(metric: Metric) -> list[Finding]:
    """Return a warning when the judge is the agent's own model."""
    judge = (metric.fields.get("judge_model_options") or {}).get("judge_model")
    if metric.info is None or not metric.agent_model or judge != metric.agent_model:
        return []
    return [
        Finding(
            "warning",
            metric.where,
            f"the judge {judge} is the agent's own model (self-preference)",
            "judge with a different model, or measure self-preference (notebook 04)",
        )
    ]


def config_rubric_texts(metric: Metric) -> list[Finding]:
    """Return the rubric-text findings of every rubric a judged rubric metric lists in the config."""
    if not metric.rubric_based or metric.fields.get("judge_model_options") is None:
        return []
    rubrics = metric.fields.get("rubrics") or []
    return [f for r in rubrics for f in _rubric_text_findings(r, f"{metric.where}.rubrics[{r.get('rubric_id')}]")]


METRIC_RULES: list[Callable[[Metric], list[Finding]]] = [
    unknown_metric,
    informational_metric,
    criterion_adk_rejects,
    threshold_outside_range,
    judge_samples,
    self_judge,
    config_rubric_texts,
]

# ---- rubric rules: one rubric text -----------------------------------------------------------

# Words that make a rubric a knowledge check in disguise (a "theory vs canon" rubric needs lore too).
# Rubrics that point at the instructions are exempt: the judge sees the developer instructions.
_KNOWLEDGE_WORDS = re.compile(
    r"\b(correct(ly)?|accurate(ly)?|true|identif(y|ies)|full name|theor(y|ies)|canon|(19|20)\d\d)\b", re.I
)


def multi_paragraph_rubric(text: str, where: str) -> list[Finding]:
    """Return a warning for a rubric text of several paragraphs."""
    if "\n\n" not in text.strip():
        return []
    return [Finding("warning", where, "multi-paragraph rubric text", "one short yes/no property per rubric")]


def knowledge_rubric(text: str, where: str) -> list[Finding]:
    """Return a warning for a rubric that checks lore knowledge (a keyword heuristic)."""
    if not _KNOWLEDGE_WORDS.search(text) or "instruction" in text.lower():
        return []
    return [
        Finding(
            "warning",
            where,
            "rubric seems to check lore knowledge; a tool-less agent gives the judge no evidence for it (keyword heuristic)",
            "move the fact into a reference answer and judge it with final_response_match_v2",
        )
    ]


RUBRIC_RULES: list[Callable[[str, str], list[Finding]]] = [multi_paragraph_rubric, knowledge_rubric]


def _rubric_text_findings(rubric: dict, where: str) -> list[Finding]:
    text = (rubric.get("rubric_content") or {}).get("text_property") or ""
    return [finding for rule in RUBRIC_RULES for finding in rule(text, where)]


# ---- case rules: one eval case ---------------------------------------------------------------


def case_rubrics(case: EvalCase, context: Context) -> list[Finding]:
    """Return, per rubric on the case or one of its turns: untyped (ADK drops it), an id clash with
    a config rubric, and the rubric-text findings."""
    findings = []
    for place, rubrics in _rubric_places(case):
        for rubric in rubrics:
            where = f"{place} rubric {rubric.rubric_id}"
            if context.has_rubric_metric and rubric.type != "FINAL_RESPONSE_QUALITY":
                message = "per-case rubric has no type FINAL_RESPONSE_QUALITY: ADK drops it silently"
                findings.append(Finding("error", where, message, 'add "type": "FINAL_RESPONSE_QUALITY"'))
            if rubric.rubric_id in context.config_rubric_ids:
                message = "rubric id also used by a config rubric"
                findings.append(Finding("error", where, message, "give it a unique rubric_id"))
            findings += _rubric_text_findings(rubric.model_dump(), where)
    return findings


def per_turn_rubrics_in_multi_turn(case: EvalCase, context: Context) -> list[Finding]:
    """Return a warning for a multi-turn case with per-turn rubrics (ADK loses earlier turns)."""
    turns = case.conversation or []
    if len(turns) <= 1 or not any(invocation.rubrics for invocation in turns):
        return []
    return [
        Finding(
            "warning",
            f"case {case.eval_id}",
            "multi-turn case with per-turn rubrics: ADK 2.13 loses earlier turns",
            "put rubrics on the case, or split the conversation",
        )
    ]


def empty_trajectory_in_order(case: EvalCase, context: Context) -> list[Finding]:
    """Return a warning per turn with no expected tool use under an IN_ORDER trajectory metric."""
    if not context.in_order_trajectory:
        return []
    return [
        Finding(
            "warning",
            f"case {case.eval_id} turn {turn}",
            "empty expected trajectory under IN_ORDER passes any trajectory",
            "put 'call no tool' cases in their own evalset with match_type EXACT",
        )
        for turn, invocation in enumerate(case.conversation or [], start=1)
        if not (invocation.intermediate_data and getattr(invocation.intermediate_data, "tool_uses", None))
    ]


CASE_RULES: list[Callable[..., list[Finding]]] = [
    case_rubrics,
    per_turn_rubrics_in_multi_turn,
    empty_trajectory_in_order,
]


def _rubric_places(case) -> list[tuple[str, list]]:
    where = f"case {case.eval_id}"
    per_turn = [(f"{where} turn {i + 1}", inv.rubrics or []) for i, inv in enumerate(case.conversation or [])]
    return [(where, case.rubrics or []), *per_turn]


def _context(config, metrics: list[Metric]) -> Context:
    criteria = config.criteria or {}
    trajectory = criteria.get("tool_trajectory_avg_score")
    match_type = criterion_fields(trajectory).get("match_type", "EXACT") if trajectory is not None else "EXACT"
    rubric_metrics = [metric for metric in metrics if metric.rubric_based]
    return Context(
        has_rubric_metric=bool(rubric_metrics),
        config_rubric_ids={rubric.get("rubric_id") for m in rubric_metrics for rubric in m.fields.get("rubrics") or []},
        in_order_trajectory=str(match_type).upper() == "IN_ORDER",
    )
