"""ADK's own tools see the workbook's work: every run_eval leaves ADK's EvalSetResult in the agent's
eval history, the workbook's evalsets are linked into the agent's folder, and `adk web` (offline, on
127.0.0.1, the agent package in replay mode) lists both on its eval routes.

Everything is written into a temporary agents folder (WORKBOOK_ADK_AGENTS), never into agents/.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import scripted
from conftest import REPO, setenv
from google.adk.evaluation.eval_config import EvalConfig
from google.adk.evaluation.local_eval_set_results_manager import LocalEvalSetResultsManager

import helpers
from workbook.adk_files import APP_NAME, link_evalsets

CASE = "breach_sequel"


def _judge_reply(valid: bool) -> str:
    return json.dumps({"reasoning": "because", "is_the_agent_response_valid": "valid" if valid else "invalid"})


def _scripted_run(tmp_path, monkeypatch) -> tuple:
    """One case of the final evalset, twice, judged by two metrics (scripted models: plumbing only);
    return (agents folder, run table, meta.json)."""
    agents = tmp_path / "agents"
    shutil.copytree(REPO / "agents" / APP_NAME, agents / APP_NAME, ignore=shutil.ignore_patterns(".adk", "*.json"))
    setenv(monkeypatch, WORKBOOK_ADK_AGENTS=str(agents), WORKBOOK_OUTPUTS=str(tmp_path / "outputs"))
    scripted.SCRIPTS["scripted/agent"] = ["Breach is the last chapter.", "Breach ends the story."]
    scripted.SCRIPTS["scripted/judge"] = [_judge_reply(v) for v in (True, True, True, False, False, True)]
    rouge = EvalConfig(criteria={"response_match_score": 0.9})  # no judge model; fails on these answers
    table = helpers.run_eval(
        helpers.build_archivist("v4", model="scripted/agent"),
        "final",
        ["final_reference", rouge],
        repeats=2,
        run_id="adk-history",
        case_ids=[CASE],
        judge_model="scripted/judge",
        show_findings=False,
    )
    meta = json.loads((tmp_path / "outputs" / "runs" / "adk-history" / "meta.json").read_text())
    return agents, table, meta


def test_run_eval_writes_adks_eval_set_result_read_back_by_adk(recordings, tmp_path, monkeypatch):
    agents, table, meta = _scripted_run(tmp_path, monkeypatch)
    manager = LocalEvalSetResultsManager(agents_dir=str(agents))
    assert manager.list_eval_set_results(APP_NAME) == [meta["adk_eval_set_result"]]
    result = manager.get_eval_set_result(APP_NAME, meta["adk_eval_set_result"])
    assert result.eval_set_id == "final"
    assert [case.eval_id for case in result.eval_case_results] == [CASE, CASE]  # one per repeat (session)
    for case in result.eval_case_results:
        metrics = {m.metric_name: m.eval_status.name for m in case.overall_eval_metric_results}
        assert metrics.keys() == {"final_response_match_v2", "response_match_score"}
        assert metrics["response_match_score"] == "FAILED" and case.final_eval_status.name == "FAILED"
        per_invocation = case.eval_metric_result_per_invocation[0]
        assert len(per_invocation.eval_metric_results) == 2
        assert "Breach" in per_invocation.actual_invocation.final_response.parts[0].text
    reference = table[table.metric == "final_response_match_v2"].groupby("repeat").status.first()
    adk_reference = [
        next(m.eval_status.name for m in c.overall_eval_metric_results if m.metric_name == "final_response_match_v2")
        for c in result.eval_case_results
    ]
    assert sorted(adk_reference) == sorted(reference)  # the same verdicts as the run table
    in_repo = (REPO / "agents" / APP_NAME / ".adk" / "eval_history").glob(f"{meta['adk_eval_set_result']}*")
    assert not list(in_repo)  # tests write to a temporary agents folder


def test_a_run_of_another_agent_lands_in_that_agents_history(recordings, tmp_path, monkeypatch):
    """Pit Wall runs belong to agents/pit_wall, where `adk web` shows them next to that agent (scripted
    models: plumbing only)."""
    agents = tmp_path / "agents"
    setenv(monkeypatch, WORKBOOK_ADK_AGENTS=str(agents), WORKBOOK_OUTPUTS=str(tmp_path / "outputs"))
    scripted.SCRIPTS["scripted/agent"] = ["Max Verstappen won and scored 26 points."]
    helpers.run_eval(
        helpers.build_pit_wall("closed", model="scripted/agent"),
        "pit_wall",
        EvalConfig(criteria={"response_match_score": 0.9}),
        run_id="pit-wall-history",
        case_ids=["sao_paulo_winner"],
        show_findings=False,
    )
    meta = json.loads((tmp_path / "outputs" / "runs" / "pit-wall-history" / "meta.json").read_text())
    manager = LocalEvalSetResultsManager(agents_dir=str(agents))
    assert manager.list_eval_set_results("pit_wall") == [meta["adk_eval_set_result"]]
    assert manager.list_eval_set_results(APP_NAME) == []
    assert (agents / "pit_wall" / "pit_wall.evalset.json").is_symlink()  # adk web lists the evalset beside it


def test_the_history_id_is_this_runs_file_when_another_job_writes_at_the_same_moment(recordings, tmp_path, monkeypatch):
    """A parallel report job saving its own result between our listing and ours must not be taken for ours."""
    save = LocalEvalSetResultsManager.save_eval_set_result

    def save_beside_another_job(self, app_name, eval_set_id, eval_case_results):
        other = [case.model_copy(update={"session_id": "another-job"}) for case in eval_case_results]
        save(self, app_name, eval_set_id, other)
        save(self, app_name, eval_set_id, eval_case_results)

    monkeypatch.setattr(LocalEvalSetResultsManager, "save_eval_set_result", save_beside_another_job)
    agents, table, meta = _scripted_run(tmp_path, monkeypatch)
    result = LocalEvalSetResultsManager(agents_dir=str(agents)).get_eval_set_result(
        APP_NAME, meta["adk_eval_set_result"]
    )
    assert len(LocalEvalSetResultsManager(agents_dir=str(agents)).list_eval_set_results(APP_NAME)) == 2
    assert "another-job" not in {case.session_id for case in result.eval_case_results}


def test_evalset_links_follow_data_evalsets_and_leave_files_alone(tmp_path):
    folder = tmp_path / APP_NAME
    folder.mkdir()
    (folder / "gone.evalset.json").symlink_to(tmp_path / "nowhere.evalset.json")
    (folder / "mine.evalset.json").write_text("{}")  # e.g. made in adk web: never touched
    links = link_evalsets(tmp_path)
    assert {link.name for link in links} == {p.name for p in (REPO / "data" / "evalsets").glob("*.evalset.json")}
    assert all(link.is_symlink() and link.resolve().parent == REPO / "data" / "evalsets" for link in links)
    assert not (folder / "gone.evalset.json").is_symlink() and (folder / "mine.evalset.json").read_text() == "{}"
    assert link_evalsets(tmp_path) == links  # idempotent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str, timeout: float = 10):
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return json.loads(reply.read())


def _post(url: str, body: dict, timeout: float = 60):
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.loads(reply.read())


def _wait_until_up(server: subprocess.Popen, base: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"adk web exited with {server.returncode}")
        try:
            _get(f"{base}/list-apps", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"adk web did not answer on {base} within {seconds:.0f} s")


@pytest.fixture
def adk_web(recordings, tmp_path, monkeypatch):
    """`adk web` on a free loopback port over a temporary agents folder holding one scripted run;
    yields (base URL, meta.json of the run). The server is always killed, with its process group."""
    agents, _, meta = _scripted_run(tmp_path, monkeypatch)
    base = f"http://127.0.0.1:{_free_port()}"
    env = {**os.environ, "WORKBOOK_RECORD_MODE": "replay", "WORKBOOK_RECORDINGS": str(REPO / "data" / "recordings")}
    adk = str(Path(sys.executable).with_name("adk"))  # .venv's, beside this Python
    command = [adk, "web", "--host", "127.0.0.1", "--port", base.rsplit(":", 1)[1]]
    log = open(tmp_path / "adk_web.log", "wb")  # noqa: SIM115  (closed below, after the server)
    server = subprocess.Popen(
        [*command, "--no-reload", str(agents)], env=env, stdout=log, stderr=log, start_new_session=True
    )
    try:
        _wait_until_up(server, base, seconds=120)
        yield base, meta
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
        log.close()


def test_adk_web_lists_the_workbooks_evalsets_and_runs_and_replays_the_agent(adk_web):
    base, meta = adk_web
    app = f"{base}/dev/apps/{APP_NAME}"
    assert _get(f"{base}/list-apps") == [APP_NAME]
    assert set(_get(f"{app}/eval-sets")["evalSetIds"]) >= {"final", "defects", "round1"}
    assert CASE in _get(f"{app}/eval_sets/final/evals")
    assert meta["adk_eval_set_result"] in _get(f"{app}/eval-results")["evalResultIds"]
    result = _get(f"{app}/eval-results/{meta['adk_eval_set_result']}")
    assert result["evalSetId"] == "final" and [c["evalId"] for c in result["evalCaseResults"]] == [CASE, CASE]
    # The agent package itself, in strict replay: notebook 01's recorded answer, no model loaded.
    session = _post(f"{base}/apps/{APP_NAME}/users/student/sessions", {})
    message = {"role": "user", "parts": [{"text": "Who is Blurryface?"}]}
    body = {"appName": APP_NAME, "userId": "student", "sessionId": session["id"], "newMessage": message}
    events = _post(f"{base}/run", body, timeout=120)
    assert events[-1]["customMetadata"]["replayed"] is True
    assert "Blurryface" in events[-1]["content"]["parts"][0]["text"]
