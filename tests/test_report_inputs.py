"""`python -m helpers report` on a small grid in a temporary copy of the repository, in strict replay of
the committed recordings: a job reruns when a data file it read changed and only then, a plan names
what would run, and a report killed with SIGKILL midway ends, after a rerun, with the run tables of an
uninterrupted report. (What `plan` says about a grid with stale jobs: tests/test_plan.py.)"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import REPO

SMALL_GRID = """teaching_notebooks:
  - 01_build_the_archivist.ipynb
grid:
  notebook: batch_eval_run.ipynb
  fixed:
    agent_model: local/qwen-0.5b
    judge_model: local/qwen-1.5b
    evalset: small
    configs: [final_reference]
  vary:
    prompt_version: [v1, v4]
"""
JOBS = ["01_build_the_archivist", "batch_eval_run__prompt_version=v1", "batch_eval_run__prompt_version=v4"]
RUNS = ["grid__prompt_version=v1", "grid__prompt_version=v4"]


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    """A copy of the code, notebooks and data, with the small grid; the report runs it uninterrupted once."""
    root = tmp_path_factory.mktemp("repo")
    shutil.copy(REPO / "helpers.py", root)
    for folder in ("workbook", "notebooks", "data"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", "*.lock"))
    final = json.loads((root / "data" / "evalsets" / "final.evalset.json").read_text())
    small = {**final, "eval_set_id": "small", "eval_cases": final["eval_cases"][:2]}  # their calls are recorded
    (root / "data" / "evalsets" / "small.evalset.json").write_text(json.dumps(small))
    (root / "grid.yaml").write_text(SMALL_GRID)
    first = _helpers(root, "report", "grid.yaml", outputs=root / "first")
    plan = _helpers(root, "plan", "grid.yaml", outputs=root / "first")
    return {"root": root, "first": first, "plan": plan}


def _environment(root, outputs):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("WORKBOOK_")}
    environment |= {"PYTHONPATH": str(root), "WORKBOOK_OUTPUTS": str(outputs), "WORKBOOK_RECORD_MODE": "replay"}
    environment["WORKBOOK_MODEL_CACHE"] = str(root / "no-model-cache")  # a live call would fill it
    return environment


def _helpers(root, *arguments, outputs):
    done = subprocess.run(
        [sys.executable, "-m", "helpers", *arguments],
        cwd=root,
        env=_environment(root, outputs),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _statuses(stdout):
    """job -> 'ran' or 'skipped', from the report's summary lines."""
    found = {}
    for line in stdout.splitlines():
        for job in JOBS:
            if line.split()[-1:] == [job] or f" {job}  (" in line:
                found[job] = line.split()[0]
    return found


def _tables(outputs):
    return {run: (outputs / "runs" / run / "table.csv").read_text() for run in RUNS}


def test_the_first_report_runs_every_job_and_notes_what_each_read(copy):
    assert _statuses(copy["first"]) == dict.fromkeys(JOBS, "ran")
    done = json.loads((copy["root"] / "first" / "notebooks" / f"{JOBS[2]}.done.json").read_text())
    assert "data/prompts/archivist_v4.md" in done["inputs"]["files"]
    assert "data/evalsets/small.evalset.json" in done["inputs"]["files"]
    assert "data/prompts/archivist_v1.md" not in done["inputs"]["files"]
    assert "data/configs/final_reference.json" in done["inputs"]["files"]
    used = done["inputs"]["recordings"]
    assert set(used) == {"data/recordings/local_qwen-0.5b.jsonl", "data/recordings/local_qwen-1.5b.jsonl"}
    assert [len(used[cassette]["keys"]) for cassette in sorted(used)] == [2, 6]  # 2 answers, 2 x 3 judge samples
    assert not (copy["root"] / "no-model-cache").exists()  # strict replay: no weights were ever touched
    assert copy["plan"].count("skipped: finished, inputs unchanged") == 3
    assert "No job would call a model" in copy["plan"]


def test_editing_a_recording_a_job_used_reruns_it(copy):
    root, outputs = copy["root"], copy["root"] / "first"
    cassette = root / "data" / "recordings" / "local_qwen-1.5b.jsonl"
    original = cassette.read_text()
    used = json.loads((outputs / "notebooks" / f"{JOBS[2]}.done.json").read_text())["inputs"]["recordings"]
    digest = used["data/recordings/local_qwen-1.5b.jsonl"]["keys"][0][0]
    lines = [  # re-recorded: a new timestamp on one recording the v4 job replayed (its table stays the same)
        line.replace('"recorded_at": "', '"recorded_at": "1', 1) if digest in line else line
        for line in original.splitlines(keepends=True)
    ]
    cassette.write_text("".join(lines))
    assert _statuses(_helpers(root, "report", "grid.yaml", outputs=outputs)) == {
        JOBS[0]: "skipped",
        JOBS[1]: "skipped",
        JOBS[2]: "ran",
    }


def test_editing_a_prompt_reruns_only_the_jobs_that_read_it(copy):
    root, outputs = copy["root"], copy["root"] / "first"
    assert _statuses(_helpers(root, "report", "grid.yaml", outputs=outputs)) == dict.fromkeys(JOBS, "skipped")
    prompt = root / "data" / "prompts" / "archivist_v1.md"
    original = prompt.read_text()
    prompt.write_text(original.replace("<!--", "<!-- edited by the test.", 1))  # the header is never sent
    rerun = _statuses(_helpers(root, "report", "grid.yaml", outputs=outputs))
    assert rerun == {JOBS[0]: "ran", JOBS[1]: "ran", JOBS[2]: "skipped"}  # 01 lists and shows every prompt


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_report_killed_midway_then_rerun_gives_the_uninterrupted_tables(copy, workers):
    """The first two jobs finished earlier; SIGKILL hits the report while the third replays its calls,
    in this process (1 worker) or on a local Dask worker (2), whose read log is in its scratch folder."""
    root, outputs = copy["root"], copy["root"] / f"killed-{workers}"
    shutil.copytree(root / "first", outputs, ignore=shutil.ignore_patterns(f"{JOBS[2]}.*", RUNS[1]))
    report = subprocess.Popen(
        [sys.executable, "-m", "helpers", "report", "grid.yaml", "--workers", workers],
        cwd=root,
        env=_environment(root, outputs),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        logs = f"notebooks/{JOBS[2]}.reads.jsonl" if workers == "1" else ".dask-scratch/*/reads.jsonl"
        deadline = time.monotonic() + 600
        while report.poll() is None and time.monotonic() < deadline:  # the job notes each recording it replays
            if any('"recording"' in reads.read_text() for reads in outputs.glob(logs)):
                break
            time.sleep(0.05)
        kernels = psutil.Process(report.pid).children(recursive=True)
        report.send_signal(signal.SIGKILL)
        report.wait()
        _, alive = psutil.wait_procs(kernels, timeout=15)  # a kernel exits when its parent dies
        for kernel in alive:
            kernel.kill()
    finally:
        if report.poll() is None:
            report.kill()
    assert report.returncode == -signal.SIGKILL
    assert not (outputs / "notebooks" / f"{JOBS[2]}.done.json").exists()
    rerun = _statuses(_helpers(root, "report", "grid.yaml", outputs=outputs))
    assert rerun == {JOBS[0]: "skipped", JOBS[1]: "skipped", JOBS[2]: "ran"}
    assert _tables(outputs) == _tables(root / "first")
