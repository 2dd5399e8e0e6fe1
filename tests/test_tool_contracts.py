"""Chapter 06: hallucinations_v1 with a constrained local judge, the recorded tool calls, `adk eval` on the
Pit Wall evalsets, and notebook 06 in strict replay."""

import json
import os
import subprocess

import pandas as pd
import pytest
from conftest import REPO
from google.adk.evaluation.eval_case import IntermediateData, Invocation
from google.adk.evaluation.eval_metrics import EvalMetric, HallucinationsCriterion, JudgeModelOptions
from google.adk.evaluation.hallucinations_v1 import HallucinationsV1Evaluator, _parse_validation_results
from google.genai import types
from notebook_runner import outputs_text, progress_bar_remnants, run_notebook, stderr_outputs

import helpers
from workbook.evalfiles import CONFIGS, EVALSETS
from workbook.judge_formats import (
    SEGMENTER_FORMAT_VERSION,
    VALIDATOR_FORMAT_VERSION,
    judge_output_constraint,
    last_prompt,
    validator_sentences,
)
from workbook.llama import reply_message

SMALL = "local/smollm2-135m"
CASSETTE = REPO / "data" / "recordings" / "local_qwen-1.5b.jsonl"


def _judge_hallucinations(user: str, answer: str, grand_prix: str) -> tuple[list[dict], float | None]:
    """Return (the judge calls, ADK's score) of smollm2 judging one answer given after one race-results call."""
    metric = EvalMetric(
        metric_name="hallucinations_v1",
        criterion=HallucinationsCriterion(threshold=1.0, judge_model_options=JudgeModelOptions(judge_model=SMALL)),
    )
    call = types.FunctionCall(name="get_race_results", args={"season": 2024, "grand_prix": grand_prix})
    result = types.FunctionResponse(name="get_race_results", response={"winner": "Max Verstappen", "points": 26})
    invocation = Invocation(
        user_content=types.Content(role="user", parts=[types.Part(text=user)]),
        final_response=types.Content(role="model", parts=[types.Part(text=answer)]),
        intermediate_data=IntermediateData(tool_uses=[call], tool_responses=[result]),
    )
    with helpers.call_log() as calls:
        scored = helpers.run_sync(HallucinationsV1Evaluator(metric).evaluate_invocations([invocation], None))
    return list(calls), scored.overall_score


def test_hallucination_judge_replies_are_accepted_by_adks_parser(recordings):
    """A real small model judges: its replies are constrained to ADK's layout (labels are its own)."""
    (segmenter, validator), score = _judge_hallucinations(
        "Who won in Bahrain?", "Max Verstappen won. He scored 26 points.", "Bahrain"
    )
    assert segmenter["constrained"] == validator["constrained"] == "grammar"
    assert segmenter["request"]["judge_format"] == SEGMENTER_FORMAT_VERSION
    assert validator["request"]["judge_format"] == VALIDATOR_FORMAT_VERSION
    asked = validator_sentences(validator["request"]["contents"][-1]["text"])
    parsed = _parse_validation_results(validator["text"])
    assert [block["sentence"] for block in parsed] == [sentence.strip() for sentence in asked] and asked
    assert score is not None and 0.0 <= score <= 1.0


def test_the_validator_budget_fits_a_long_sentence_it_must_copy(recordings):
    """The validator's token budget grows with the sentences it must copy (under h2 a qwen-1.5b reply on this
    sentence was cut at its budget and left unparsed); a real small model's reply on it ends on its own and
    ADK parses the block."""
    sentence = (
        "The winner of the 2024 São Paulo Grand Prix scored 26 points because they finished in the top 10, and "
        "from 2019 to 2024, the driver who finished in the top 10 scored one extra point when finishing in the "
        "top 10 (so a win with the fastest lap is 26)."
    )
    validator = _judge_hallucinations("Why 26 points?", sentence, "Sao Paulo")[0][-1]
    assert validator["finish_reason"] == "STOP"
    short = json.loads(json.dumps(validator["request"], ensure_ascii=False).replace(sentence, "Verstappen won."))
    extra = judge_output_constraint(validator["request"])["max_tokens"] - judge_output_constraint(short)["max_tokens"]
    assert extra >= (len(sentence) - len("Verstappen won.")) // 2
    asked = validator_sentences(last_prompt(validator["request"]))
    assert len(_parse_validation_results(validator["text"])) == len(asked)


def _recorded_tool_calls() -> list[dict]:
    entries = [json.loads(line) for line in CASSETTE.read_text().splitlines() if line.strip()]
    return [entry["reply"] for entry in entries if entry["reply"].get("tool_calls")]


def test_recorded_tool_calls_are_the_models_own_text():
    """Every recorded call was read from what the model wrote (kept as raw_text), to a declared tool."""
    replies = _recorded_tool_calls()
    assert replies, "no recorded tool calls: record notebook 06 (WORKBOOK_RECORD_MODE=auto)"
    declared = {"tools": [{"name": "get_race_results"}, {"name": "get_driver_standings"}]}
    for reply in replies:
        assert reply_message({"content": reply["raw_text"]}, declared)["tool_calls"] == reply["tool_calls"]


def _adk_eval(evalset: str, config: str) -> str:
    command = [
        str(REPO / ".venv" / "bin" / "adk"), "eval", str(REPO / "agents" / "pit_wall"), str(EVALSETS / evalset),
        "--config_file_path", str(CONFIGS / config), "--print_detailed_results",
    ]  # fmt: skip
    env = {**os.environ, "WORKBOOK_RECORD_MODE": "replay"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    return done.stdout + done.stderr


def test_adk_eval_accepts_the_no_tool_evalset_and_replays_offline():
    output = _adk_eval("pit_wall_no_tools.evalset.json", "pit_wall_no_tools.json")
    assert "Traceback" not in output and "No recording" not in output
    assert "Eval Run Summary" in output and output.count("tool_trajectory_avg_score:") == 2


def test_adk_eval_accepts_the_contract_evalset_and_replays_offline():
    output = _adk_eval("pit_wall.evalset.json:sao_paulo_winner", "pit_wall_contract.json")
    assert "Traceback" not in output and "No recording" not in output
    for metric in ("tool_trajectory_avg_score", "final_response_match_v2", "hallucinations_v1"):
        assert f"{metric}:" in output


@pytest.fixture(scope="module")
def notebook06(tmp_path_factory):
    """Notebook 06 executed once in strict replay, its run tables and findings under a temporary outputs folder."""
    outputs = tmp_path_factory.mktemp("nb06")
    patch = pytest.MonkeyPatch()
    patch.setenv("WORKBOOK_OUTPUTS", str(outputs))  # inherited by the papermill kernel
    helpers.refresh_settings()
    try:
        yield run_notebook("06_tool_contracts.ipynb", outputs), outputs
    finally:
        patch.undo()
        helpers.refresh_settings()


def test_notebook_06_replays_with_per_sentence_verdicts_for_both_contracts_and_a_computed_f10(notebook06):
    notebook, outputs = notebook06
    assert not stderr_outputs(notebook) and not progress_bar_remnants(notebook)
    text = outputs_text(notebook)
    assert "**F10 reproduced**" in text or "**F10 not reproduced by this judge**" in text
    findings = (outputs / "runs" / "nb06-findings" / "findings.csv").read_text()
    assert findings.startswith("finding,") and "\nF10," in findings
    for contract in ("gap", "closed"):
        path = outputs / "runs" / f"pit_wall-{contract}" / "table.csv"
        assert '""label"": ""' in path.read_text()  # hallucinations_v1 sentence labels kept in the run table
        answers = pd.read_csv(path)
        assert answers.case.nunique() == 4 and answers.repeat.nunique() == 3  # every question, three repeats
    assert "run ended: RaceDataError" in text  # a tool error without the callback ends the run
    assert "empty expected trajectory under IN_ORDER passes any trajectory" in text


def test_contract_runs_keep_tools_called_and_each_sentence_label(recordings, tmp_path, monkeypatch):
    """Plumbing, with scripted models: one case per contract, the agent calls the tool, then answers;
    the judge segments the answer and labels each sentence (gap: one unsupported)."""
    import scripted
    from conftest import setenv

    setenv(monkeypatch, WORKBOOK_OUTPUTS=str(tmp_path))
    call = {"tool_calls": [{"name": "get_race_results", "args": {"season": 2024, "grand_prix": "Sao Paulo"}}]}
    answer = "Verstappen won. He scored 26 points with the fastest lap."
    scripted.SCRIPTS["scripted/agent"] = [call, answer, call, answer]
    segments = "<sentence>Verstappen won.</sentence>\n<sentence>He scored 26 points with the fastest lap.</sentence>\n"

    def labels(second: str) -> str:
        return "\n\n".join(
            f"sentence: {s}\nlabel: {label}\nrationale: r\nsupporting_excerpt: null\ncontradicting_excerpt: null"
            for s, label in (("Verstappen won.", "supported"), ("He scored 26 points with the fastest lap.", second))
        )

    reference = '{\n  "reasoning": "ok",\n  "is_the_agent_response_valid": "valid"\n}'
    # The reference metric samples 3 times (pit_wall_contract.json); the closed arm's reference and segmenter
    # requests equal the gap arm's (same answer): they replay.
    scripted.SCRIPTS["scripted/judge"] = [reference] * 3 + [segments, labels("unsupported"), labels("supported")]
    runs = helpers.contract_runs(1, "scripted/agent", "scripted/judge", ["sao_paulo_winner"])
    assert set(runs.tools_called.dropna()) == {"get_race_results"}
    sentences = helpers.sentence_verdicts(runs)
    assert list(sentences.label) == ["supported", "unsupported", "supported", "supported"]
    assert list(sentences.arm) == ["gap", "gap", "closed", "closed"]
    summary = helpers.contract_summary(runs)
    assert summary.loc["hallucinations_v1", ("passed", "gap")] == 0
    assert summary.loc["hallucinations_v1", ("passed", "closed")] == 1
    assert summary.loc["tool_trajectory_avg_score", ("passed", "gap")] == 1
    f10 = helpers.contract_finding(runs)
    assert f10["finding"] == "F10" and f10["outcome"] == "not reproduced by this judge"  # one answer per arm
    assert "gap: 0/1" in f10["arms"] and "closed: 1/1" in f10["arms"]


def test_unjudged_text_is_what_no_segmented_sentence_holds():
    """Hand-made run rows: a clause cut at a comma, a sentence re-punctuated but whole, and one fully judged."""
    answers = {
        "cut": ("Norris won, and he also got the point for the fastest lap.", ["Norris won,"]),
        "repunctuated": ("Verstappen scored 26 points, with 25 for the win.", ["Verstappen scored 26 points."]),
        "whole": ("Verstappen won. He scored 26.5 points.", ["Verstappen won.", "He scored 26.5 points."]),
    }
    rows = [
        {"arm": "gap", "case": case, "repeat": 0, "metric": "hallucinations_v1", "score": 1.0, "answer": answer}
        | {"sentence_labels": json.dumps([{"sentence": s, "label": "supported"} for s in sentences])}
        for case, (answer, sentences) in answers.items()
    ]
    unjudged = helpers.unjudged_text(pd.DataFrame(rows)).set_index("case").unjudged
    assert unjudged.to_dict() == {
        "cut": "and he also got the point for the fastest lap",
        "repunctuated": "with 25 for the win",
        "whole": "",
    }
