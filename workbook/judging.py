"""Eval step two (notebooks 02 and 04): ADK's evaluators judge the answers, one metric at a time,
and every judge sample becomes a row (ADK itself keeps only the winning sample)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.adk.evaluation.base_eval_service import InferenceResult
    from google.adk.evaluation.eval_config import EvalConfig
    from google.adk.evaluation.local_eval_service import LocalEvalService

from workbook.cassettes import CallLog, tag_calls
from workbook.evalfiles import METRIC_KINDS
from workbook.failures import error_rows, mark_judge_errors
from workbook.judge_formats import judge_kind, last_prompt, parse_judge_reply, rubric_properties, verdict_probability
from workbook.util import first_line, progress, text_of


async def judge_inferences(
    service: LocalEvalService,
    inferences: list[tuple[int, InferenceResult]],
    config: EvalConfig,
    calls: CallLog,
    failures: list[dict],
) -> list[dict]:
    """Return one row per (repeat, case, invocation, metric, judge sample) for judged inferences.

    Judges metric by metric, so each judge prompt family keeps llama.cpp's prefix cache warm.
    `calls` is the run's open call log: judge replies and agent usage are read back from it.
    `failures` is the run scope's failure list: a result whose calls failed becomes status ERROR,
    and so does every metric of a case whose answer failed (ADK would drop that case).
    """
    from google.adk.evaluation.eval_config import get_eval_metrics_from_config

    rows = []
    for metric in [m for m in get_eval_metrics_from_config(config) if m.metric_name in config.criteria]:
        bar = progress(total=len(inferences), desc=f"judging: {metric.metric_name}")
        try:
            for repeat, inference in inferences:
                rows += await _judge_one(service, inference, metric, repeat, calls, failures)
                bar.update(1)
        finally:
            bar.close()
    return rows


async def _judge_one(service, inference, metric, repeat: int, calls: CallLog, failures: list[dict]) -> list[dict]:
    from google.adk.evaluation.base_eval_service import EvaluateConfig, EvaluateRequest, InferenceStatus

    case = inference.eval_case_id
    if inference.status == InferenceStatus.FAILURE or inference.inferences is None:
        cause = first_line(inference.error_message or "the agent gave no answer")
        return error_rows(case, repeat, metric.metric_name, f"agent answer failed: {cause}")
    tag_calls(phase="judge", case=case, repeat=repeat, metric=metric.metric_name)
    first_call, first_failure = len(calls), len(failures)
    request = EvaluateRequest(
        inference_results=[inference.model_copy(deep=True)],  # ADK adds case rubrics to it in place
        evaluate_config=EvaluateConfig(eval_metrics=[metric], parallelism=1),
    )
    case_results = [result async for result in service.evaluate(request)]
    judge_calls = [call for call in calls[first_call:] if call.get("phase") == "judge" and call.get("case") == case]
    agent_calls = [
        call
        for call in calls
        if call.get("phase") == "agent" and call.get("case") == case and call.get("repeat") == repeat
    ]
    rows = _rows_for_case(case_results[0], judge_calls, agent_calls, repeat)
    return mark_judge_errors(rows, failures[first_failure:], case, repeat, metric.metric_name)


def _rows_for_case(case_result, judge_calls: list[dict], agent_calls: list[dict], repeat: int) -> list[dict]:
    from google.adk.evaluation.eval_case import get_all_tool_calls

    agent_usage = {
        "agent_prompt_tokens": sum(c["usage"]["prompt_tokens"] for c in agent_calls),
        "agent_output_tokens": sum(c["usage"]["output_tokens"] for c in agent_calls),
        "agent_thinking_tokens": sum(c["usage"].get("thinking_tokens", 0) for c in agent_calls),
        "agent_latency_s": round(sum(c.get("latency_s") or 0 for c in agent_calls), 3),
    }
    every_call = agent_calls + judge_calls
    replayed = all(c.get("replayed") for c in every_call) if every_call else None
    rows = []
    for number, per_invocation in enumerate(case_result.eval_metric_result_per_invocation, start=1):
        actual, expected = per_invocation.actual_invocation, per_invocation.expected_invocation
        base = {
            "repeat": repeat,
            "case": case_result.eval_id,
            "invocation": number,
            "user": text_of(actual.user_content),
            "answer": text_of(actual.final_response),
            "reference": text_of(expected.final_response) if expected else "",
            "tools_called": ",".join(call.name for call in get_all_tool_calls(actual.intermediate_data)),
            **agent_usage,
            "replayed": replayed,
        }
        for result in per_invocation.eval_metric_results:
            if result.eval_status.name != "INFORMATIONAL":  # ADK's efficiency counters: the table has its own
                rows += _metric_rows(base, result, judge_calls)
    return rows


def _metric_rows(base: dict, result, judge_calls: list[dict]) -> list[dict]:
    kind = METRIC_KINDS.get(result.metric_name, "other")
    common = {**base, "metric": result.metric_name, "score": result.score, "status": result.eval_status.name}
    common["threshold"] = result.threshold if result.threshold is not None else _criterion_threshold(result)
    calls = [c for c in judge_calls if judge_kind(c["request"]) == kind and base["user"] in last_prompt(c["request"])]
    if not calls:
        return [{**common, "judge": kind, "sample": 0, "sample_score": result.score}]
    return [{**common, **_sample_fields(kind, call, common["threshold"]), "sample": n} for n, call in enumerate(calls)]


def _sample_fields(kind: str, call: dict, threshold: float | None) -> dict:
    fields = {
        "judge": call["model"],
        "raw_reply": call["text"],
        "judge_prompt_tokens": call["usage"]["prompt_tokens"],
        "judge_output_tokens": call["usage"]["output_tokens"],
        "judge_latency_s": call.get("latency_s"),
        **parse_judge_reply(kind, call["text"]),
        "sample_verdict": "unparsed",
    }
    if kind == "reference" and call.get("logprobs"):  # judged with response_logprobs on
        fields["p_yes"] = verdict_probability(call["text"], call["logprobs"])
    if kind == "rubric":  # what the judge was shown, since ADK can drop a rubric without a word
        fields["rubrics_seen"] = ",".join(rubric_id for rubric_id, _ in rubric_properties(last_prompt(call["request"])))
    if fields["sample_score"] is not None:
        passed = fields["sample_score"] >= (threshold if threshold is not None else 0.5)
        fields["sample_verdict"] = "pass" if passed else "fail"
    return fields


def _criterion_threshold(result) -> float | None:
    criterion = getattr(result, "criterion", None)
    return getattr(criterion, "threshold", None)
