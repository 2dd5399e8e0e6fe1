"""Replay that never lies: run-scoped occurrences, no silent loss inside ADK's eval, lint gates runs,
malformed cassette lines, credential redaction and the judge format version in the cassette key."""

import json
import logging
import os
import subprocess
import sys

import pytest
import scripted
from conftest import REPO, set_mode, setenv

import helpers
from workbook import judge_formats
from workbook.cassettes import CassetteStore, cassettes, credential_values
from workbook.evalfiles import EVALSETS

AGENT, JUDGE = "local/qwen-0.5b", "local/qwen-1.5b"
TWO_CASES = ["breach_sequel", "dema_depression"]  # recorded by the report grid (v4, judged by qwen-1.5b)


def _request(text: str) -> dict:
    return {"model": "local/scripted", "system": "", "contents": [{"role": "user", "text": text}], "config": {}}


def _live(texts):
    """A scripted stand-in for a model (plumbing): returns the next text on each call."""
    iterator = iter(texts)

    async def live_call(seed):
        usage = {"prompt_tokens": 3, "output_tokens": 1, "thinking_tokens": 0}
        return {"text": next(iterator), "finish_reason": "STOP", "latency_s": 0.1, "usage": usage}

    return live_call


def _replies(store, count, live=None):
    return [helpers.run_sync(store.call(_request("judge"), live or _live([]))).get("text") for _ in range(count)]


def test_occurrences_count_per_scope_and_nested_scopes_join_the_outer_one(recordings, monkeypatch):
    """Plumbing (scripted replies): each scope counts from 0; outside scopes the process counts."""
    _replies(cassettes(), 2, _live(["first", "second"]))  # recorded outside any scope: occurrences 0, 1
    set_mode(monkeypatch, "replay")
    for _ in range(2):  # the same run twice: the same replies
        with helpers.replay_scope("run"):
            assert _replies(cassettes(), 2) == ["first", "second"]
    with helpers.replay_scope("outer"), helpers.replay_scope("inner run"):  # the outermost wins
        assert _replies(cassettes(), 1) == ["first"]
        with helpers.replay_scope("another inner run"):
            assert _replies(cassettes(), 1) == ["second"]
    assert _replies(cassettes(), 2) == ["first", "second"]  # outside: per process, as before
    with pytest.raises(helpers.ReplayMissError, match="occurrence 2"):
        _replies(cassettes(), 1)


def _two_case_eval(config="final_reference", **kwargs):
    agent = helpers.build_archivist("v4", model=AGENT)
    return helpers.run_eval(
        agent, "final", config, judge_model=JUDGE, case_ids=TWO_CASES, show_findings=False, **kwargs
    )


def test_the_same_run_eval_twice_in_one_process_gives_identical_tables(monkeypatch, tmp_path, capsys):
    """Committed recordings, strict replay: re-running a cell reproduces its table."""
    setenv(monkeypatch, WORKBOOK_RECORD_MODE="replay", WORKBOOK_OUTPUTS=str(tmp_path))
    first = _two_case_eval(run_id="again")
    second = _two_case_eval(run_id="again")
    assert len(first) == 6 and set(first.case) == set(TWO_CASES) and first.replayed.all()
    assert first.equals(second)
    meta = json.loads((tmp_path / "runs" / "again" / "meta.json").read_text())
    assert (meta["errors"], meta["not_evaluated"], meta["unparsed_samples"]) == (0, 0, 0)
    assert "run again: 2 case result(s), 6 row(s); 0 ERROR, 0 NOT_EVALUATED" in capsys.readouterr().out


def _evalset_with_new_case(tmp_path):
    data = json.loads((EVALSETS / "final.evalset.json").read_text())
    cases = [case for case in data["eval_cases"] if case["eval_id"] in TWO_CASES]
    new = json.loads(json.dumps(cases[0]))
    new["eval_id"] = "never_recorded"
    new["conversation"][0]["user_content"]["parts"][0]["text"] = "A question nobody has recorded yet?"
    path = tmp_path / "with_new.evalset.json"
    path.write_text(json.dumps({**data, "eval_set_id": "final", "eval_cases": [*cases, new]}))
    return path


def test_a_new_case_in_strict_replay_raises_naming_the_case_and_the_record_command(monkeypatch, tmp_path):
    setenv(monkeypatch, WORKBOOK_RECORD_MODE="replay", WORKBOOK_OUTPUTS=str(tmp_path))
    agent = helpers.build_archivist("v4", model=AGENT)
    evalset = _evalset_with_new_case(tmp_path)
    with pytest.raises(helpers.IncompleteRunError) as error:
        helpers.run_eval(agent, evalset, "final_reference", judge_model=JUDGE, run_id="miss", show_findings=False)
    message = str(error.value)
    assert "case never_recorded, metric final_response_match_v2: agent answer failed: No recording" in message
    assert "make report LIVE=1" in message and "on_error='keep'" in message
    assert "breach_sequel" not in message and not (tmp_path / "runs" / "miss").exists()
    with pytest.warns(UserWarning, match="never_recorded"):
        kept = helpers.run_eval(
            agent, evalset, "final_reference", judge_model=JUDGE, run_id="kept", show_findings=False, on_error="keep"
        )
    assert dict(kept.drop_duplicates("case")[["case", "status"]].values)["never_recorded"] == "ERROR"
    assert len(kept[kept.status != "ERROR"]) == 6
    meta = json.loads((tmp_path / "runs" / "kept" / "meta.json").read_text())
    assert (meta["errors"], meta["not_evaluated"]) == (1, 0)


def test_a_changed_judge_format_version_misses_instead_of_replaying_stale_verdicts(monkeypatch, tmp_path):
    """Committed recordings (format v1), strict replay: the bounded rubric format v2 keys rubric judge calls
    anew, so they miss; reference judge calls, whose format v2 leaves alone, still replay."""
    setenv(monkeypatch, WORKBOOK_RECORD_MODE="replay", WORKBOOK_OUTPUTS=str(tmp_path))
    reference = {"model": JUDGE, "system": "", "contents": [{"role": "user", "text": '"is_the_agent_response_valid"'}]}
    rubric = {**reference, "contents": [{"role": "user", "text": "<properties>\n* [id: a] Short.\n</properties>"}]}
    rubric["contents"][0]["text"] += "\nVerdict: [yes|no]"
    assert judge_formats.format_key({**rubric, "config": {}}) == {}  # v1: today's recordings, digests unchanged
    setenv(monkeypatch, WORKBOOK_JUDGE_FORMAT="v2", WORKBOOK_JUDGE_EVIDENCE_CHARS="50")
    assert judge_formats.format_key({**rubric, "config": {}}) == {"judge_format": "v2-e50-r64"}
    assert judge_formats.format_key({**reference, "config": {}}) == {}
    assert judge_formats.format_key(_request("an agent turn")) == {}  # agent calls carry no judge format
    assert _two_case_eval(run_id="v2-reference").replayed.all()
    with pytest.raises(helpers.IncompleteRunError) as error:
        _two_case_eval(run_id="v2", config="final_behaviour")
    message = str(error.value)
    assert message.count("judge failed: replay miss for local/qwen-1.5b") == 2 and "make report LIVE=1" in message


def test_an_unrecorded_judge_in_a_panel_raises_naming_judge_cases(monkeypatch, tmp_path):
    """Plumbing: frozen answers, a judge model with no recordings, strict replay."""
    import pandas as pd

    setenv(monkeypatch, WORKBOOK_RECORD_MODE="replay", WORKBOOK_OUTPUTS=str(tmp_path))
    answers = pd.DataFrame(
        {"case": ["a", "b"], "user": ["Q1?", "Q2?"], "answer": ["A1", "A2"], "reference": ["R1", "R2"]}
    ).assign(agent_model="scripted/agent")
    with pytest.raises(helpers.IncompleteRunError) as error:
        helpers.judge_panel(answers, ["rouge", "scripted/unrecorded"], samples=1, repeats=1, run_id="p")
    message = str(error.value)
    assert "case a, metric final_response_match_v2: judge failed: replay miss for scripted/unrecorded" in message
    assert "case b" in message and "response_match_score" not in message


def test_a_papermill_run_with_a_miss_exits_non_zero(tmp_path):
    evalset = _evalset_with_new_case(tmp_path)
    output = tmp_path / "out.ipynb"
    env = {**os.environ, "WORKBOOK_RECORD_MODE": "replay", "WORKBOOK_OUTPUTS": str(tmp_path), "PYTHONPATH": str(REPO)}
    command = [
        sys.executable, "-m", "papermill", str(REPO / "notebooks" / "batch_eval_run.ipynb"), str(output),
        "-p", "evalset", str(evalset), "-p", "run_id", "nb-miss", "-k", helpers.KERNEL_NAME, "--cwd", str(REPO / "notebooks"),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode != 0
    assert "IncompleteRunError" in done.stderr and "never_recorded" in done.stderr
    assert not (tmp_path / "runs" / "nb-miss").exists()


BAD_CONFIGS = {
    "threshold 1.5": ({"response_match_score": 1.5}, "threshold 1.5 is outside [0, 1]"),
    "unknown metric": ({"final_response_match_v3": 0.5}, "no metric named 'final_response_match_v3'"),
    "zero samples": (
        {"final_response_match_v2": {"threshold": 0.5, "judge_model_options": {"judge_model": JUDGE, "num_samples": 0}}},
        "num_samples=0",
    ),
    "negative samples": (
        {"final_response_match_v2": {"threshold": 0.5, "judge_model_options": {"judge_model": JUDGE, "num_samples": -1}}},
        "num_samples=-1",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(BAD_CONFIGS))
def test_lint_errors_stop_run_eval_before_any_model_call(name, recordings, tmp_path, monkeypatch):
    """Plumbing: a scripted agent that would answer; nothing may be called or recorded."""
    setenv(monkeypatch, WORKBOOK_OUTPUTS=str(tmp_path))
    criteria, what = BAD_CONFIGS[name]
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"criteria": criteria}))
    scripted.SCRIPTS["scripted/agent"] = ["an answer"]
    with helpers.call_log() as calls, pytest.raises(helpers.EvalLintError) as error:
        helpers.run_eval(helpers.build_archivist("v1", model="scripted/agent"), "final", config, show_findings=False)
    assert what in str(error.value) and f"{config}: config criteria." in str(error.value)
    assert "Fix:" in str(error.value) and len(calls) == 0 and not recordings.exists()


def test_an_untyped_case_rubric_stops_the_run_naming_the_evalset(recordings):
    with pytest.raises(helpers.EvalLintError) as error:
        helpers.run_eval(helpers.build_archivist("v1", model="scripted/agent"), "untyped_rubric", "defects_rubric")
    message = str(error.value)
    assert "data/evalsets/untyped_rubric.evalset.json: case untyped_tripwire turn 1 rubric tripwire_french" in message
    assert 'add "type": "FINAL_RESPONSE_QUALITY"' in message and not recordings.exists()


def test_metric_names_come_from_adks_registry_and_even_samples_warn_for_every_majority_vote(tmp_path):
    config = tmp_path / "c.json"
    rubric = {
        "threshold": 0.5,
        "judge_model_options": {"judge_model": JUDGE, "num_samples": 2},
        "rubrics": [{"rubric_id": "r", "rubric_content": {"text_property": "Stays on the story."}}],
    }
    criteria = {
        "rubric_based_final_response_quality_v1": rubric,
        "rubric_based_multi_turn_trajectory_quality_v1": rubric,
        "response_evaluation_score": 4.0,  # ADK's range for this one is [1, 5]
    }
    config.write_text(json.dumps({"criteria": criteria}))
    findings = helpers.lint_evalset("final", config)
    assert not [f for f in findings if f.severity == "error"], findings
    even = [f.where for f in findings if "is even" in f.what]
    assert even == [f"config criteria.{name}.judge_model_options" for name in list(criteria)[:2]]
    config.write_text(json.dumps({"criteria": {"token_usage_v1": 1.0}}))
    assert any("reported on every eval" in f.what for f in helpers.lint_evalset("final", config))


def test_a_malformed_cassette_line_is_skipped_naming_file_and_line(recordings, caplog):
    store = cassettes()
    helpers.run_sync(store.call(_request("q"), _live(["kept"])))
    cassette = store.cassette_path("local/scripted")
    with open(cassette, "a") as handle:
        handle.write('{"digest": "abc", "reply": {"text": "no occurrence"}}\n[1, 2]\nnot json\n')
    with caplog.at_level(logging.WARNING, logger="workbook.cassettes"):
        fresh = CassetteStore(recordings, "replay")
        assert helpers.run_sync(fresh.call(_request("q"), _live([])))["text"] == "kept"
    warnings = [record.getMessage() for record in caplog.records]
    assert any(f"{cassette} line {n} is not a recording" in w for n in (2, 3) for w in warnings)
    assert any(f"{cassette} line 4 is not valid JSON" in w for w in warnings)


def test_redaction_removes_credentials_only(recordings, monkeypatch):
    setenv(
        monkeypatch,
        GOOGLE_API_KEY="AIza-setting-value-123",
        SERVICE_TOKEN="tok-abcdefgh",
        HF_SECRET="shh-abcdefgh",
        OPENAI_API_KEY="sk-abcdefghij",
        HOME_TOWN="Trench lore text",  # ordinary text in an ordinary variable
        KEYBOARD_LAYOUT="Trench layout",
    )
    assert {"AIza-setting-value-123", "tok-abcdefgh", "shh-abcdefgh", "sk-abcdefghij"} <= set(credential_values())
    assert "Trench lore text" not in credential_values() and "Trench layout" not in credential_values()
    reply = "Trench lore text; Trench layout; tok-abcdefgh; sk-abcdefghij; AIza-setting-value-123"
    helpers.run_sync(cassettes().call(_request("secrets?"), _live([reply])))
    line = cassettes().cassette_path("local/scripted").read_text()
    assert "Trench lore text; Trench layout; [REDACTED]; [REDACTED]; [REDACTED]" in line


def test_env_files_are_ignored_but_the_example_is_not():
    ignored = subprocess.run(["git", "check-ignore", ".env", ".env.local", ".env.prod"], cwd=REPO, capture_output=True)
    assert ignored.stdout.decode().split() == [".env", ".env.local", ".env.prod"]
    example = subprocess.run(["git", "check-ignore", "-q", ".env.example"], cwd=REPO)
    assert example.returncode == 1
