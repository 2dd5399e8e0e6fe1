"""Record mode `plan` and `python -m helpers plan`: a recorded call replays, a missing one is counted and
answered with a marked placeholder that ADK's judges accept, nothing is written, no model is called."""

import pytest
from conftest import REPO, set_mode, setenv
from google.adk.evaluation.eval_case import Invocation
from google.adk.evaluation.eval_metrics import EvalMetric, JudgeModelOptions, LlmAsAJudgeCriterion
from google.adk.evaluation.final_response_match_v2 import FinalResponseMatchV2Evaluator
from google.genai import types

import helpers
from workbook.cassettes import cassettes
from workbook.planning import PLACEHOLDER, planned_calls

REQUEST = {
    "model": "local/scripted",
    "system": "",
    "contents": [{"role": "user", "text": "Who is Nico?"}],
    "config": {},
}


async def _live(seed):
    return {"text": "A bishop.", "finish_reason": "STOP", "latency_s": 2.5, "usage": {"prompt_tokens": 3}}


def _no_live_call(seed):
    raise AssertionError("plan mode called a model")


def test_plan_mode_replays_a_hit_and_counts_a_miss_without_writing(recordings, monkeypatch):
    helpers.run_sync(cassettes().call(REQUEST, _live))  # recorded in auto mode
    cassette = cassettes().cassette_path("local/scripted")
    recorded = cassette.read_text()
    set_mode(monkeypatch, "plan")
    before = len(planned_calls())
    hit = helpers.run_sync(cassettes().call(REQUEST, _no_live_call))
    miss = helpers.run_sync(cassettes().call(REQUEST, _no_live_call))  # a second occurrence is not recorded
    assert (hit["text"], hit["replayed"]) == ("A bishop.", True)
    assert miss["text"] == PLACEHOLDER and miss["planned"] and not miss["replayed"]
    counted = planned_calls()[before:]
    assert [(c["hit"], c["kind"]) for c in counted] == [(True, "agent"), (False, "agent")]
    assert counted[1]["occurrence"] == 1 and counted[1]["prompt_head"] == "Who is Nico?"
    follow_up = {**REQUEST, "contents": [*REQUEST["contents"], {"role": "model", "text": miss["text"]}]}
    helpers.run_sync(cassettes().call(follow_up, _no_live_call))
    assert planned_calls()[-1]["depends"]  # it follows a missing answer: an estimate
    assert cassette.read_text() == recorded


def test_a_judge_placeholder_is_parsed_by_adk_so_the_eval_goes_on(recordings, monkeypatch):
    set_mode(monkeypatch, "plan")
    options = JudgeModelOptions(judge_model="local/smollm2-135m", num_samples=2)
    metric = EvalMetric(
        metric_name="final_response_match_v2",
        criterion=LlmAsAJudgeCriterion(threshold=0.5, judge_model_options=options),
    )

    def invocation(answer):
        return Invocation(
            user_content=types.Content(role="user", parts=[types.Part(text="What colour is Trench?")]),
            final_response=types.Content(role="model", parts=[types.Part(text=answer)]),
        )

    evaluator = FinalResponseMatchV2Evaluator(metric)
    result = helpers.run_sync(evaluator.evaluate_invocations([invocation("Yellow.")], [invocation("Yellow.")]))
    assert result.per_invocation_results[0].score == 1.0  # None would mean ADK could not parse the stand-in
    assert [(c["model"], c["kind"], c["hit"]) for c in planned_calls()[-2:]] == [
        ("local/smollm2-135m", "reference", False)
    ] * 2
    assert not list(recordings.glob("*.jsonl"))


def test_plan_of_notebook_02_with_more_repeats_counts_the_missing_calls(tmp_path, monkeypatch):
    """The README's example: repeats 3 needs answers nobody recorded, and judge calls that grade them."""
    cassettes_before = {p.name: p.read_bytes() for p in (REPO / "data" / "recordings").glob("*.jsonl")}
    setenv(monkeypatch, WORKBOOK_MODEL_CACHE=str(tmp_path / "models"), WORKBOOK_OUTPUTS=str(tmp_path / "outputs"))
    plan = helpers.plan_run(REPO / "notebooks" / "02_rubric_vs_reference.ipynb", {"repeats": 3})
    assert [row["error"] for row in plan.jobs] == [""]
    summary = helpers.plan_summary(plan).set_index(["model", "kind"])
    agent = summary.loc[("local/qwen-0.5b", "agent")]
    # repeats 2 and 3 of the 15 final cases, less those an experiment recorded with the same request
    assert 0 < agent.missing <= 30 and agent["of them after a missing answer"] == 0
    missing_answers = [c for c in plan.calls if c["kind"] == "agent" and not c["hit"]]
    assert {c["occurrence"] for c in missing_answers} <= {1, 2}
    judged = summary.loc[("local/qwen-1.5b", "reference")]  # final_reference: 3 samples per answer
    assert judged["of them after a missing answer"] == 3 * agent.missing
    assert summary.loc[("local/qwen-1.5b", "rubric"), "of them after a missing answer"] == agent.missing
    assert judged["s per call"] > 0 and judged["live min"] == pytest.approx(
        judged.missing * judged["s per call"] / 60, abs=0.1
    )
    assert summary.replays.sum() > 100  # repeat 1, round 1 and the defect evals replay
    text = helpers.format_plan(plan)
    assert "no model was called" in text and "estimated from that placeholder" in text and "LIVE=1" in text
    assert not (tmp_path / "models").exists()  # no weights were assembled: no model was loaded
    assert {p.name: p.read_bytes() for p in (REPO / "data" / "recordings").glob("*.jsonl")} == cassettes_before
