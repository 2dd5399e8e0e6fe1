"""The report grid on Dask: a report through a scheduler with two workers on 127.0.0.1 equals a serial one;
a failed job fails the report without losing the jobs that finished; a worker's recordings reach the shared
cassettes only through the client's merge, under the keys a direct recording would have."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, setenv

import helpers
from workbook import grid_dask
from workbook.cassettes import CassetteStore, merge_recordings, request_digest, shared_recordings
from workbook.inputs import input_record, local_read_log, portable_read_log
from workbook.util import file_digest

GRID = """grid:
  notebook: batch_eval_run.ipynb
  fixed:
    agent_model: local/qwen-0.5b
    judge_model: local/qwen-1.5b
    configs: [final_reference]
  vary:
    prompt_version: [v1, v4]
    evalset: [final]
"""
JOBS = ["batch_eval_run__prompt_version=v1__evalset=final", "batch_eval_run__prompt_version=v4__evalset=final"]


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    """A Dask scheduler and two single-threaded workers on 127.0.0.1 (random free ports), as separate
    processes importing this checkout; yields the scheduler's address."""
    folder = tmp_path_factory.mktemp("dask")
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    dask = [str(Path(sys.executable).parent / "dask")]
    log = open(folder / "cluster.log", "w")  # noqa: SIM115 (closed after the processes)
    started = [
        subprocess.Popen(
            [*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0"]
            + ["--scheduler-file", str(folder / "scheduler.json")],
            env=environment,
            stdout=log,
            stderr=log,
        )
    ]
    try:
        address = _scheduler_address(folder / "scheduler.json")
        for _ in range(2):
            worker = [*dask, "worker", address, "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard"]
            started.append(subprocess.Popen(worker, env=environment, stdout=log, stderr=log))
        yield address
    finally:
        for process in reversed(started):
            process.terminate()
        for process in started:
            process.wait(timeout=30)
        log.close()


def _scheduler_address(scheduler_file: Path) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if scheduler_file.exists() and scheduler_file.read_text().strip():
            return json.loads(scheduler_file.read_text())["address"]
        time.sleep(0.2)
    raise TimeoutError(f"no Dask scheduler wrote {scheduler_file}")


def _report(tmp_path, monkeypatch, name, grid_text=GRID, **how):
    grid = tmp_path / "grid.yaml"
    grid.write_text(grid_text)
    outputs = tmp_path / name
    setenv(monkeypatch, WORKBOOK_OUTPUTS=str(outputs), WORKBOOK_RECORD_MODE="replay", PYTHONPATH=str(REPO))
    return helpers.run_grid(grid, **how), outputs


def _tables(outputs: Path) -> dict:
    return {str(path.relative_to(outputs)): path.read_text() for path in sorted(outputs.glob("runs/*/table.csv"))}


def _inputs(outputs: Path, job: str) -> dict:
    return json.loads((outputs / "notebooks" / f"{job}.done.json").read_text())["inputs"]


def test_a_report_through_a_scheduler_with_two_workers_equals_a_serial_one(scheduler, tmp_path, monkeypatch):
    serial, serial_outputs = _report(tmp_path, monkeypatch, "serial", workers=1)
    spread, spread_outputs = _report(tmp_path, monkeypatch, "dask", scheduler=scheduler)
    assert (
        [(r["job"], r["status"]) for r in spread]
        == [(job, "ran") for job in JOBS]
        == [(r["job"], r["status"]) for r in serial]
    )
    tables = _tables(spread_outputs)
    assert list(tables) == ["runs/grid__prompt_version=v1__evalset=final/table.csv", "runs/grid__prompt_version=v4__evalset=final/table.csv"]  # fmt: skip
    assert tables == _tables(serial_outputs)
    for job in JOBS:  # the executed notebooks came back, and what each job read is recorded as if it ran here
        assert (spread_outputs / "notebooks" / f"{job}.ipynb").is_file()
        assert _inputs(spread_outputs, job) == _inputs(serial_outputs, job)
        assert "data/recordings/local_qwen-1.5b.jsonl" in _inputs(spread_outputs, job)["recordings"]
    again, _ = _report(tmp_path, monkeypatch, "dask", scheduler=scheduler)
    assert [r["status"] for r in again] == ["skipped (finished earlier)"] * 2


def test_a_failed_job_fails_the_report_and_the_finished_one_is_kept(tmp_path, monkeypatch):
    """On a local cluster of two workers: one grid point names an evalset that does not exist."""
    grid = GRID.replace("evalset: [final]", "evalset: [final, no_such_evalset]").replace("[v1, v4]", "[v4]")
    with pytest.raises(helpers.GridRunError) as failed:
        _report(tmp_path, monkeypatch, "outputs", grid_text=grid, workers=2)
    outputs = tmp_path / "outputs" / "notebooks"
    message = str(failed.value)
    assert message.startswith(
        "1 report job(s) failed:\n  batch_eval_run__prompt_version=v4__evalset=no-such-evalset (worker "
    )
    assert "no_such_evalset" in message and str(outputs / "batch_eval_run__prompt_version=v4__evalset=no-such-evalset.ipynb") in message  # fmt: skip
    assert (
        outputs / "batch_eval_run__prompt_version=v4__evalset=no-such-evalset.ipynb"
    ).is_file()  # shows the failing cell
    assert not (outputs / "batch_eval_run__prompt_version=v4__evalset=no-such-evalset.done.json").exists()
    assert (outputs / "batch_eval_run__prompt_version=v4__evalset=final.done.json").is_file()
    assert (tmp_path / "outputs" / "runs" / "grid__prompt_version=v4__evalset=final" / "table.csv").is_file()


def test_an_unreachable_scheduler_is_named_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(grid_dask, "CONNECT_TIMEOUT_S", 2)
    with pytest.raises(helpers.GridRunError, match=r"WORKBOOK_DASK_SCHEDULER=tcp://127.0.0.1:9: no Dask scheduler answered .*dask scheduler"):  # fmt: skip
        _report(tmp_path, monkeypatch, "outputs", scheduler="tcp://127.0.0.1:9")


def test_workers_below_one_are_refused(tmp_path, monkeypatch):
    with pytest.raises(helpers.GridRunError, match=r"report workers: 0; give 1 or more"):
        _report(tmp_path, monkeypatch, "outputs", workers=0)


def _request(text: str) -> dict:
    return {"model": "local/scripted", "system": "", "contents": [{"role": "user", "text": text}], "config": {}}


def _call(store: CassetteStore, text: str, reply: str | None = None) -> str:
    """One call through a store; `reply` is what a scripted stand-in for a model answers (plumbing), None
    when the call must replay."""

    async def live_call(seed):
        assert reply is not None, f"{text!r} should have replayed"
        return {"text": reply, "finish_reason": "STOP", "latency_s": 0.1, "usage": {"output_tokens": 1}}

    return helpers.run_sync(store.call(_request(text), live_call))["text"]


def test_a_workers_recordings_reach_the_shared_cassettes_only_through_the_merge(recordings, tmp_path, monkeypatch):
    """Plumbing with scripted replies: the worker replays what is shared and records the rest into its
    scratch folder; the client's merge appends it under the same key, once; a key another job recorded
    with another reply is a conflict, left as it is; credentials never reach the shared cassette."""
    _call(CassetteStore(recordings, "auto"), "shared question", "shared answer")
    cassette = recordings / "local_scripted.jsonl"
    before = cassette.read_bytes()
    scratch = tmp_path / "scratch"
    worker = CassetteStore(recordings, "auto", record_into=scratch)
    assert _call(worker, "shared question") == "shared answer"
    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("WORKBOOK_TEST_API_KEY", secret)
    assert _call(worker, "new question", f"new answer {secret}") == f"new answer {secret}"
    assert cassette.read_bytes() == before  # the worker wrote only its scratch folder
    recorded = {"local_scripted.jsonl": (scratch / "local_scripted.jsonl").read_text()}
    [line] = recorded["local_scripted.jsonl"].splitlines()
    assert (json.loads(line)["digest"], json.loads(line)["occurrence"]) == (request_digest(_request("new question")), 0)

    assert merge_recordings(recorded) == [] and merge_recordings(recorded) == []  # merged once
    assert len(cassette.read_text().splitlines()) == 2 and secret not in cassette.read_text()
    assert _call(CassetteStore(recordings, "replay"), "new question") == "new answer [REDACTED]"

    other = tmp_path / "other worker"
    _call(CassetteStore(recordings.parent / "empty", "auto", record_into=other), "new question", "another answer")
    elsewhere = {"local_scripted.jsonl": (other / "local_scripted.jsonl").read_text()}
    assert merge_recordings(elsewhere) == [("local_scripted.jsonl", request_digest(_request("new question")), 0)]
    assert len(cassette.read_text().splitlines()) == 2
    assert "new answer [REDACTED]" in shared_recordings(elsewhere)["local_scripted.jsonl"]  # what a rerun replays


def test_a_read_log_travels_to_another_checkout_with_its_outputs_paths_moved(tmp_path):
    """A worker's job read a data file, a recording and a file it wrote in its own outputs folder."""
    worker_outputs, client_outputs = tmp_path / "worker" / "outputs", tmp_path / "client" / "outputs"
    for outputs in (worker_outputs, client_outputs):
        outputs.mkdir(parents=True)
        (outputs / "promoted.evalset.json").write_text("{}")
    read_log = tmp_path / "worker" / "reads.jsonl"
    notes = [
        {"file": str(REPO / "data" / "evalsets" / "final.evalset.json")},
        {"file": str(worker_outputs / "promoted.evalset.json")},
        {"recording": str(REPO / "data" / "recordings" / "local_qwen-0.5b.jsonl"), "key": ["abc", 0]},
    ]
    read_log.write_text("".join(json.dumps(note) + "\n" for note in notes))
    portable = portable_read_log(read_log, worker_outputs)
    assert str(tmp_path) not in portable and str(REPO) not in portable
    local_read_log(portable, tmp_path / "client" / "reads.jsonl", client_outputs)
    record = input_record(tmp_path / "client" / "reads.jsonl")
    assert set(record["files"]) == {"data/evalsets/final.evalset.json", str(client_outputs / "promoted.evalset.json")}
    assert record == {**input_record(read_log), "files": record["files"]}
    assert record["files"][str(client_outputs / "promoted.evalset.json")] == file_digest(
        client_outputs / "promoted.evalset.json"
    )


def test_files_a_job_wrote_in_scratch_outputs_inside_the_repository_are_not_checkout_files():
    """`make report` keeps local workers' scratch under outputs/.dask-scratch, inside the repository: notebook
    03 writes promoted.evalset.json there and reads it back, which must not read as another checkout's file."""
    scratch = REPO / "outputs" / ".dask-scratch" / "workbook-job-test-checkout-digests"
    outputs = scratch / "outputs"
    outputs.mkdir(parents=True, exist_ok=True)
    try:
        (outputs / "promoted.evalset.json").write_text("{}")
        read_log = scratch / "reads.jsonl"
        notes = [{"file": str(REPO / "data" / "evalsets" / "final.evalset.json")}]
        notes.append({"file": str(outputs / "promoted.evalset.json")})
        read_log.write_text("".join(json.dumps(note) + "\n" for note in notes))
        assert (
            "outputs/.dask-scratch/workbook-job-test-checkout-digests/outputs/promoted.evalset.json"
            in (input_record(read_log)["files"])
        )  # a repository-relative path, like a checkout file
        digests = grid_dask.checkout_digests(read_log, outputs)
        assert digests == {"data/evalsets/final.evalset.json": file_digest(REPO / "data/evalsets/final.evalset.json")}
    finally:
        shutil.rmtree(scratch)


def test_calls_recorded_by_local_jobs_of_an_interrupted_report_are_merged_by_the_next_run(recordings, tmp_path):
    """Plumbing with a scripted reply: a killed local worker left its scratch folder in the outputs folder."""
    scratch = tmp_path / "outputs" / ".dask-scratch" / "workbook-job-killed" / "recordings"
    _call(CassetteStore(recordings, "auto", record_into=scratch), "asked before the interruption", "kept")
    grid_dask.run_on_dask([], tmp_path / "outputs" / "notebooks", False, None, scheduler=None, workers=2)
    assert _call(CassetteStore(recordings, "replay"), "asked before the interruption") == "kept"
    assert not any((tmp_path / "outputs" / ".dask-scratch").iterdir())
