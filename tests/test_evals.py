"""The eval engine's run table and the evalset linter."""

import json

import pytest
import scripted
from conftest import REPO, setenv

import helpers
from workbook.evalfiles import CONFIGS, EVALSETS

GOOD_CASE = {
    "eval_id": "ok",
    "conversation": [
        {
            "invocation_id": "ok-1",
            "user_content": {"role": "user", "parts": [{"text": "Who is Nico?"}]},
            "final_response": {"role": "model", "parts": [{"text": "The chief bishop of Dema."}]},
        }
    ],
}


def _files(tmp_path, case_changes=None, criteria=None):
    case = json.loads(json.dumps(GOOD_CASE))
    for key, value in (case_changes or {}).items():
        if key == "invocation":
            case["conversation"][0].update(value)
        else:
            case[key] = value
    evalset = tmp_path / "t.evalset.json"
    evalset.write_text(json.dumps({"eval_set_id": "t", "eval_cases": [case]}))
    config = tmp_path / "c.json"
    default = {
        "final_response_match_v2": {
            "threshold": 0.5,
            "judge_model_options": {"judge_model": "local/qwen-1.5b", "num_samples": 3},
        }
    }
    config.write_text(json.dumps({"criteria": criteria or default}))
    return evalset, config


def _whats(tmp_path, agent_model="local/qwen-0.5b", **kwargs):
    evalset, config = _files(tmp_path, **kwargs)
    return [f.what for f in helpers.lint_evalset(evalset, config, agent_model=agent_model)]


RUBRIC = {
    "threshold": 0.8,
    "judge_model_options": {"judge_model": "local/qwen-1.5b", "num_samples": 1},
    "rubrics": [{"rubric_id": "scope", "rubric_content": {"text_property": "Stays on the story."}}],
}


def test_a_good_pair_has_no_findings(tmp_path):
    assert _whats(tmp_path) == []
    assert _whats(tmp_path, criteria={"rubric_based_final_response_quality_v1": RUBRIC}) == []


def test_untyped_per_case_rubric_is_flagged_and_typed_one_is_not(tmp_path):
    untyped = [{"rubric_id": "french", "rubric_content": {"text_property": "Is in French."}}]
    criteria = {"rubric_based_final_response_quality_v1": RUBRIC}
    assert any(
        "drops it silently" in w
        for w in _whats(tmp_path, criteria=criteria, case_changes={"invocation": {"rubrics": untyped}})
    )
    typed = [dict(untyped[0], type="FINAL_RESPONSE_QUALITY")]
    assert not any(
        "drops" in w for w in _whats(tmp_path, criteria=criteria, case_changes={"invocation": {"rubrics": typed}})
    )


def test_duplicate_rubric_id_between_config_and_case(tmp_path):
    clash = [{"rubric_id": "scope", "rubric_content": {"text_property": "Short."}, "type": "FINAL_RESPONSE_QUALITY"}]
    criteria = {"rubric_based_final_response_quality_v1": RUBRIC}
    assert any(
        "also used by a config rubric" in w
        for w in _whats(tmp_path, criteria=criteria, case_changes={"rubrics": clash})
    )


def test_multi_paragraph_rubric_and_knowledge_rubric(tmp_path):
    rubric = dict(
        RUBRIC, rubrics=[{"rubric_id": "long", "rubric_content": {"text_property": "Stays on topic.\n\nAnd is kind."}}]
    )
    assert "multi-paragraph rubric text" in _whats(
        tmp_path, criteria={"rubric_based_final_response_quality_v1": rubric}
    )
    knowledge = dict(
        RUBRIC,
        rubrics=[{"rubric_id": "k", "rubric_content": {"text_property": "States correctly that Blurryface is Nico."}}],
    )
    assert any(
        "lore knowledge" in w for w in _whats(tmp_path, criteria={"rubric_based_final_response_quality_v1": knowledge})
    )
    pointing_at_instructions = dict(
        RUBRIC,
        rubrics=[
            {
                "rubric_id": "f",
                "rubric_content": {"text_property": "Claims stay within the Known facts in the instructions."},
            }
        ],
    )
    assert _whats(tmp_path, criteria={"rubric_based_final_response_quality_v1": pointing_at_instructions}) == []


def test_multi_turn_case_with_per_turn_rubrics(tmp_path):
    evalset, config = _files(tmp_path, criteria={"rubric_based_final_response_quality_v1": RUBRIC})
    data = json.loads(evalset.read_text())
    turn = dict(data["eval_cases"][0]["conversation"][0])
    turn["rubrics"] = [
        {"rubric_id": "t", "rubric_content": {"text_property": "Short."}, "type": "FINAL_RESPONSE_QUALITY"}
    ]
    data["eval_cases"][0]["conversation"] = [turn, dict(turn, invocation_id="ok-2")]
    evalset.write_text(json.dumps(data))
    whats = [f.what for f in helpers.lint_evalset(evalset, config)]
    assert any("loses earlier turns" in w for w in whats)


def test_empty_trajectory_under_in_order(tmp_path):
    criteria = {"tool_trajectory_avg_score": {"threshold": 1.0, "match_type": "IN_ORDER"}}
    assert any("passes any trajectory" in w for w in _whats(tmp_path, criteria=criteria))
    exact = {"tool_trajectory_avg_score": {"threshold": 1.0, "match_type": "EXACT"}}
    assert _whats(tmp_path, criteria=exact) == []


def test_unknown_metric_threshold_even_samples_and_self_judge(tmp_path):
    assert any("no metric named" in w for w in _whats(tmp_path, criteria={"final_response_match_v3": 0.5}))
    assert any("outside [0, 1]" in w for w in _whats(tmp_path, criteria={"response_match_score": 1.5}))
    even = {
        "final_response_match_v2": {
            "threshold": 0.5,
            "judge_model_options": {"judge_model": "local/qwen-1.5b", "num_samples": 4},
        }
    }
    assert any("is even" in w for w in _whats(tmp_path, criteria=even))
    assert any("self-preference" in w for w in _whats(tmp_path, agent_model="local/qwen-1.5b"))


def test_malformed_json_and_schema_errors_name_file_and_path(tmp_path):
    broken = tmp_path / "broken.evalset.json"
    broken.write_text('{"eval_set_id": "x", "eval_cases": [}')
    with pytest.raises(helpers.EvalFileError, match=r"broken.evalset.json: not valid JSON at line 1"):
        helpers.load_evalset(broken)
    wrong = tmp_path / "wrong.evalset.json"
    wrong.write_text(json.dumps({"eval_set_id": "x", "eval_cases": [{"eval_id": 3, "conversation": "no"}]}))
    with pytest.raises(helpers.EvalFileError, match=r"wrong.evalset.json: .*at \$\.eval_cases\.0\."):
        helpers.load_evalset(wrong)


def test_committed_evalsets_and_configs_load():
    for name in ("round1", "final", "defects", "untyped_rubric"):
        assert helpers.load_evalset(name).eval_cases
    assert len(helpers.load_evalset("final").eval_cases) == 15
    assert len(helpers.load_evalset("round1").eval_cases) == 8
    for name in ("round1_rubrics", "final_reference", "final_behaviour", "defects_rubric", "defects_reference"):
        assert helpers.load_eval_config(name).criteria


def test_linter_takes_every_form_run_eval_takes():
    """Names, paths, ADK objects and a list of config names (merged) all lint the same."""
    configs = ["final_reference", "final_behaviour"]
    by_name = helpers.lint_evalset("final", configs, agent_model="local/qwen-0.5b")
    by_path = helpers.lint_evalset(EVALSETS / "final.evalset.json", [CONFIGS / f"{c}.json" for c in configs])
    by_object = helpers.lint_evalset(helpers.load_evalset("final"), helpers.load_eval_config(configs))
    assert by_name == by_path == by_object


def test_with_judge_replaces_only_llm_judges():
    config = helpers.with_judge(["final_reference", "final_behaviour"], judge_model="local/qwen-0.5b", num_samples=3)
    for name, criterion in config.criteria.items():
        options = criterion.model_dump()["judge_model_options"]
        assert (options["judge_model"], options["num_samples"]) == ("local/qwen-0.5b", 3), name
    from google.adk.evaluation.eval_config import EvalConfig

    mixed = EvalConfig(criteria={"response_match_score": 0.5, **helpers.load_eval_config("final_reference").criteria})
    assert helpers.with_judge(mixed, judge_model="local/x").criteria["response_match_score"] == 0.5


def _judge_reply(valid: bool) -> str:
    return json.dumps({"reasoning": "because", "is_the_agent_response_valid": "valid" if valid else "invalid"})


def _scripted_eval_files(tmp_path, monkeypatch, samples: int):
    """Evalset and config whose judge is the scripted model; run tables go under tmp_path."""
    setenv(monkeypatch, WORKBOOK_OUTPUTS=str(tmp_path))
    options = {"judge_model": "scripted/judge", "num_samples": samples}
    return _files(tmp_path, criteria={"final_response_match_v2": {"threshold": 0.5, "judge_model_options": options}})


def test_run_table_keeps_every_sample_and_statuses(recordings, tmp_path, monkeypatch):
    """Plumbing, with scripted models: two cases, three judge samples each, one reply unparseable."""
    evalset, config = _scripted_eval_files(tmp_path, monkeypatch, samples=3)
    data = json.loads(evalset.read_text())
    data["eval_cases"].append(dict(data["eval_cases"][0], eval_id="second"))
    evalset.write_text(json.dumps(data))
    scripted.SCRIPTS["scripted/agent"] = ["Nico leads the bishops.", "No idea."]
    scripted.SCRIPTS["scripted/judge"] = [
        _judge_reply(True),
        _judge_reply(False),
        _judge_reply(True),
        "I refuse to answer in JSON",
        "???",
        _judge_reply(False),
    ]
    agent = helpers.build_archivist("v1", model="scripted/agent")
    table = helpers.run_eval(agent, evalset, config, run_id="t1", show_findings=False)
    assert list(table.columns) == helpers.RUN_COLUMNS
    assert len(table) == 6 and sorted(table["sample"].unique()) == [0, 1, 2]
    ok = table[table.case == "ok"]
    assert list(ok.sample_verdict) == ["pass", "fail", "pass"] and set(ok.status) == {"PASSED"}
    assert list(ok.rationale) == ["because"] * 3
    second = table[table.case == "second"]
    assert list(second.sample_verdict) == ["unparsed", "unparsed", "fail"]
    assert set(second.status) == {"FAILED"}
    assert second.raw_reply.iloc[0] == "I refuse to answer in JSON"
    assert (tmp_path / "runs" / "t1" / "table.csv").exists()
    meta = json.loads((tmp_path / "runs" / "t1" / "meta.json").read_text())
    assert meta["judge_models"] == ["scripted/judge"] and meta["agent_model"] == "scripted/agent"
    assert (meta["errors"], meta["not_evaluated"], meta["unparsed_samples"]) == (0, 0, 2)


def test_judge_samples_overrides_the_configs_num_samples(recordings, tmp_path, monkeypatch):
    """Plumbing, with scripted models: the config asks for 1 sample, the run for 5 (the report grid's knob)."""
    evalset, config = _scripted_eval_files(tmp_path, monkeypatch, samples=1)
    scripted.SCRIPTS["scripted/agent"] = ["Nico leads the bishops."]
    scripted.SCRIPTS["scripted/judge"] = [_judge_reply(verdict) for verdict in (True, False, False, True, False)]
    agent = helpers.build_archivist("v1", model="scripted/agent")
    table = helpers.run_eval(agent, evalset, config, run_id="t5", show_findings=False, judge_samples=5)
    assert sorted(table["sample"]) == [0, 1, 2, 3, 4]
    assert sorted(table.sample_verdict) == ["fail"] * 3 + ["pass"] * 2 and set(table.status) == {"FAILED"}


def test_unparseable_judge_reply_makes_the_case_not_evaluated(recordings, tmp_path, monkeypatch):
    evalset, config = _scripted_eval_files(tmp_path, monkeypatch, samples=1)
    scripted.SCRIPTS["scripted/agent"] = ["Nico leads the bishops."]
    scripted.SCRIPTS["scripted/judge"] = ["no json at all"]
    table = helpers.run_eval(
        helpers.build_archivist("v1", model="scripted/agent"), evalset, config, run_id="t2", show_findings=False
    )
    assert list(table.status) == ["NOT_EVALUATED"]
    assert table.score.isna().all() and list(table.sample_verdict) == ["unparsed"]


def test_adk_eval_cli_accepts_the_files_unchanged_and_replays_offline():
    """`adk eval` on a two-case slice of the final evalset, in strict replay: no model runs."""
    import os
    import subprocess

    agent_dir = REPO / "agents" / "lore_archivist"  # adk writes its history to .adk/ there (git-ignored)
    command = [
        str(REPO / ".venv" / "bin" / "adk"), "eval", str(agent_dir),
        str(EVALSETS / "final.evalset.json") + ":breach_sequel,dema_depression",
        "--config_file_path", str(CONFIGS / "final_reference.json"), "--print_detailed_results",
    ]  # fmt: skip
    env = {**os.environ, "WORKBOOK_RECORD_MODE": "replay"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    output = done.stdout + done.stderr
    assert "Traceback" not in output and "No recording" not in output
    assert "Eval Run Summary" in output
    assert output.count("final_response_match_v2:") == 2  # one verdict line per case


def test_two_metrics_on_a_case_with_its_own_rubric(recordings, tmp_path, monkeypatch):
    """Metrics are judged one after another on copies: ADK adds case rubrics to what it is given."""
    setenv(monkeypatch, WORKBOOK_OUTPUTS=str(tmp_path))
    rubric = dict(RUBRIC, judge_model_options={"judge_model": "scripted/judge", "num_samples": 1})
    reference = {"threshold": 0.5, "judge_model_options": {"judge_model": "scripted/judge", "num_samples": 1}}
    case_rubric = [
        {"rubric_id": "short", "rubric_content": {"text_property": "Is short."}, "type": "FINAL_RESPONSE_QUALITY"}
    ]
    evalset, config = _files(
        tmp_path,
        criteria={"rubric_based_final_response_quality_v1": rubric, "final_response_match_v2": reference},
        case_changes={"invocation": {"rubrics": case_rubric}},
    )
    rubric_reply = "".join(
        f"ID: {rid}\nProperty: {text}\nEvidence: e\nRationale: r\nVerdict: yes\n\n"
        for rid, text in (("scope", "Stays on the story."), ("short", "Is short."))
    )
    scripted.SCRIPTS["scripted/agent"] = ["Nico leads the bishops."]
    scripted.SCRIPTS["scripted/judge"] = [rubric_reply, _judge_reply(True)]
    table = helpers.run_eval(
        helpers.build_archivist("v1", model="scripted/agent"), evalset, config, run_id="t3", show_findings=False
    )
    assert dict(zip(table.metric, table.status, strict=True)) == {
        "rubric_based_final_response_quality_v1": "PASSED",
        "final_response_match_v2": "PASSED",
    }
    assert table.set_index("metric").loc["rubric_based_final_response_quality_v1", "rubric_verdicts"] == "yes,yes"
