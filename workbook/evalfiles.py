"""Eval inputs (notebook 02): evalsets, eval configs and their criteria, each coerced in one place.

An evalset or a config can be given as a name in data/ (e.g. 'final'), a path, or an ADK object;
a config can also be a list of those, merged into one. Every function that takes one calls
`load_evalset` / `load_eval_config`, so they all accept the same forms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.adk.evaluation.eval_config import EvalConfig
    from google.adk.evaluation.eval_metrics import MetricInfo
    from google.adk.evaluation.eval_set import EvalSet
    from google.adk.evaluation.evaluator import Evaluator
    from pydantic import BaseModel

import hashlib
import json
from pathlib import Path
from typing import Any

from workbook.inputs import note_read
from workbook.settings import DATA, REPO, EvalFileError, WorkbookError
from workbook.util import file_digest

EVALSETS = DATA / "evalsets"
CONFIGS = DATA / "configs"
# What kind of verdict a metric gives, for the tables and the judge-reply parser: not the list of
# metrics that exist (that is ADK's registry, read at run time by `adk_metrics`).
METRIC_KINDS = {
    "final_response_match_v2": "reference",
    "rubric_based_final_response_quality_v1": "rubric",
    "hallucinations_v1": "hallucination",
    "response_match_score": "rouge",
    "final_response_match_v1": "rouge",
    "tool_trajectory_avg_score": "trajectory",
    "response_evaluation_score": "vertex",
    "safety_v1": "vertex",
    "rubric_based_tool_use_quality_v1": "rubric",
    "multi_turn_task_success_v1": "multi_turn",
    "multi_turn_trajectory_quality_v1": "multi_turn",
    "multi_turn_tool_use_quality_v1": "multi_turn",
}


def adk_metrics() -> dict[str, MetricInfo]:
    """Return ADK's own metric registry, read at run time: metric name -> ADK's MetricInfo."""
    import warnings

    with warnings.catch_warnings():  # ADK marks its registry experimental on first use
        warnings.simplefilter("ignore")
        from google.adk.evaluation.metric_evaluator_registry import DEFAULT_METRIC_EVALUATOR_REGISTRY

        return {info.metric_name: info for info in DEFAULT_METRIC_EVALUATOR_REGISTRY.get_registered_metrics()}


def adk_evaluator(config: EvalConfig, name: str) -> Evaluator:
    """Return the evaluator ADK builds for one criterion of a config (no model is called).

    Raises what ADK raises when the criterion is not the kind its metric expects.
    """
    import warnings

    from google.adk.evaluation.eval_config import EvalConfig, get_eval_metrics_from_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from google.adk.evaluation.metric_evaluator_registry import DEFAULT_METRIC_EVALUATOR_REGISTRY

        metric = get_eval_metrics_from_config(EvalConfig(criteria={name: config.criteria[name]}))[0]
        return DEFAULT_METRIC_EVALUATOR_REGISTRY.get_evaluator(metric)


def data_file(
    source: str | Path, folder: Path, suffix: str, must_exist: bool = True, error: type[WorkbookError] = EvalFileError
) -> Path:
    """Return the file a source stands for: a name without extension means `folder/<name><suffix>`,
    anything with an extension is a path. A missing file raises `error` listing what `folder` has."""
    path = Path(source)
    if not path.suffix:
        path = folder / f"{source}{suffix}"
    if must_exist and not path.exists():
        known = sorted(p.name.removesuffix(suffix) for p in folder.glob(f"*{suffix}"))
        raise error(f"{path}: no such file; {folder.relative_to(REPO)} has {', '.join(known)}")
    if path.exists():
        note_read(path)  # a report job reruns when a file it read changes
    return path


def load_evalset(source: str | Path | EvalSet) -> EvalSet:
    """Return an ADK EvalSet from a name in data/evalsets (e.g. 'final'), a path, or an EvalSet (as is)."""
    from google.adk.evaluation.eval_set import EvalSet

    if isinstance(source, EvalSet):
        return source
    return _validated(data_file(source, EVALSETS, ".evalset.json"), EvalSet)


def load_eval_config(source: str | Path | EvalConfig | list) -> EvalConfig:
    """Return an ADK EvalConfig from a name in data/configs (e.g. 'final_reference'), a path, an
    EvalConfig (as is), or a list of these merged into one (so two metrics judge the same answers)."""
    from google.adk.evaluation.eval_config import EvalConfig

    if isinstance(source, EvalConfig):
        return source
    if isinstance(source, list):
        merged: dict = {}
        for part in source:
            for name, criterion in (load_eval_config(part).criteria or {}).items():
                if name in merged:
                    raise EvalFileError(f"{part}: metric {name} is already set by an earlier config in {source}")
                merged[name] = criterion
        return EvalConfig(criteria=merged)
    return _validated(data_file(source, CONFIGS, ".json"), EvalConfig)


def criterion_fields(criterion: Any) -> dict:
    """Return an eval criterion as a plain dict, whichever form it has: a number (its threshold),
    a dict, or an ADK criterion object."""
    if isinstance(criterion, int | float):
        return {"threshold": criterion}
    if isinstance(criterion, dict):
        return criterion
    return criterion.model_dump()


def judge_options(criterion: Any) -> dict | None:
    """Return a criterion's judge_model_options as a dict, or None for a metric without an LLM judge."""
    return criterion_fields(criterion).get("judge_model_options")


def with_judge(
    config: str | Path | EvalConfig | list, judge_model: str | None = None, num_samples: int | None = None
) -> EvalConfig:
    """Return a copy of an eval config with every LLM-judged metric using `judge_model` / `num_samples`."""
    from google.adk.evaluation.eval_config import EvalConfig

    config = load_eval_config(config)
    if judge_model is None and num_samples is None:
        return config
    override = {key: value for key, value in (("judge_model", judge_model), ("num_samples", num_samples)) if value}
    criteria = {}
    for name, criterion in (config.criteria or {}).items():
        options = judge_options(criterion)
        if options is None:
            criteria[name] = criterion
        else:
            criteria[name] = {**criterion_fields(criterion), "judge_model_options": {**options, **override}}
    return EvalConfig.model_validate({**config.model_dump(), "criteria": criteria})


def source_record(source: str | Path | BaseModel, folder: Path, suffix: str) -> tuple[str, str]:
    """Return (name, short sha256) of an evalset or config source, for a run's meta.json."""
    if isinstance(source, str | Path):
        return str(source), file_digest(data_file(source, folder, suffix))
    return "(in memory)", hashlib.sha256(source.model_dump_json().encode()).hexdigest()[:16]


def _validated(path: Path, model):
    import pydantic

    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise EvalFileError(
            f"{path}: not valid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from None
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as error:
        problems = "; ".join(
            f"at $.{'.'.join(str(p) for p in issue['loc'])}: {issue['msg']}" for issue in error.errors()[:5]
        )
        raise EvalFileError(f"{path}: does not match ADK's {model.__name__} schema: {problems}") from None
