"""The report grid on Dask: each job is a task that papermill runs on a Dask worker in a scratch folder,
and the client writes back what the task returns (executed notebook, run tables, recordings, read log).

Local parallelism is a LocalCluster of worker processes on this machine; WORKBOOK_DASK_SCHEDULER (or
`make report SCHEDULER=tcp://host:port`) names a scheduler whose workers may be other machines holding
the same commit. A worker never writes the client's outputs or the shared cassettes: it records new
calls into scratch cassettes read over its own data/recordings, and the client merges them
(`workbook.cassettes.merge_recordings`). When two jobs recorded the same call at once, the one merged
second runs again replaying the merged recordings, so every table comes from the shared recordings,
as in a serial run. A job that fails, or comes from a worker whose code or data files differ from the
client's, is written back (its notebook shows where it failed) but not marked finished, and the report
fails once every other job is written.
"""

from __future__ import annotations

import logging
import shutil
import socket
import sys
import tempfile
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from workbook.grid import execute_job, finish_job, job_fingerprint, skipped, start_job
from workbook.grid_file import NotebookJob
from workbook.inputs import READ_LOG_VARIABLE, input_record, local_read_log, portable_read_log
from workbook.settings import REPO, GridRunError, settings
from workbook.util import atomic_write, first_line

if TYPE_CHECKING:
    from distributed import Client, Future
    from tqdm.auto import tqdm

SCRATCH_PREFIX = "workbook-job-"
# The workers' statistical profiler samples a running task's stack every 10 ms: on 2 cores it cost each local
# worker ~4 s of CPU per replayed job, and nobody reads its profiles.
LOCAL_CLUSTER_CONFIG = {"distributed.worker.profile.enabled": False}
ATTEMPTS = 3  # runs of a job whose recordings keep meeting another job's recordings of the same calls
CONNECT_TIMEOUT_S = 20


@dataclass
class JobOutcome:
    """What a job made on a worker, for the client to write back."""

    job: str
    worker: str  # the worker's host name, for messages
    seconds: float
    files: dict[str, bytes]  # path under the outputs folder -> content
    recordings: dict[str, str]  # cassette file name -> JSONL recorded by this run
    reads: str  # the read log, paths relative to the repository (workbook.inputs.portable_read_log)
    file_digests: dict[str, str]  # the data files read, as the worker's checkout holds them
    fingerprint: str  # job_fingerprint on the worker: its notebook and code
    error: str = ""  # why papermill failed ("" when the notebook ran through)


def run_job_on_worker(
    job: NotebookJob, settings_env: dict[str, str], replay: dict[str, str], scratch_root: str | None
) -> JobOutcome:
    """Return what one report job made when papermill ran it here (a Dask worker), its kernel seeing the
    client's `settings_env` (record mode, threads), in a scratch folder (under `scratch_root`, else a
    temporary one): outputs, and new recordings over this checkout's data/recordings, after `replay`
    (cassette file name -> JSONL) is put there to be replayed first."""
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, dir=scratch_root) as name:
        scratch = Path(name)
        outputs, recordings, read_log = scratch / "outputs", scratch / "recordings", scratch / "reads.jsonl"
        (outputs / "notebooks").mkdir(parents=True)
        recordings.mkdir()
        for cassette, text in replay.items():
            (recordings / cassette).write_text(text, encoding="utf-8")
        env = {**settings_env, "WORKBOOK_OUTPUTS": str(outputs), "WORKBOOK_RECORD_INTO": str(recordings)}
        env[READ_LOG_VARIABLE] = str(read_log)
        seconds, error = 0.0, ""
        try:
            seconds = execute_job(job, outputs / "notebooks" / f"{job.name}.ipynb", **env)
        except Exception as failure:  # the client reports it, with the notebook papermill wrote
            error = f"{type(failure).__name__}: {failure}"
        return JobOutcome(
            job=job.name,
            worker=socket.gethostname(),
            seconds=seconds,
            files={str(path.relative_to(outputs)): path.read_bytes() for path in outputs.rglob("*") if path.is_file()},
            recordings={
                path.name: path.read_text(encoding="utf-8").removeprefix(replay.get(path.name, ""))
                for path in recordings.glob("*.jsonl")
            },
            reads=portable_read_log(read_log, outputs),
            file_digests=checkout_digests(read_log, outputs),
            fingerprint=job_fingerprint(job),
            error=error,
        )


def checkout_digests(read_log: Path, outputs: Path) -> dict[str, str]:
    """Return the digests of the repository's files a job read (paths relative to it), as this checkout
    holds them. Files under the job's own `outputs` are left out: the job wrote them, and `make report`'s
    scratch outputs lie inside the repository (outputs/.dask-scratch), where they look like checkout files."""
    own = outputs.resolve()
    return {
        path: digest
        for path, digest in input_record(read_log)["files"].items()
        if not Path(path).is_absolute() and not (REPO / path).resolve().is_relative_to(own)
    }


def run_on_dask(
    jobs: list[NotebookJob], folder: Path, force: bool, bar: tqdm, scheduler: str | None, workers: int
) -> list[dict]:
    """Return the result rows of independent grid jobs (see `workbook.grid.run_grid`), run as Dask tasks:
    on the scheduler at `scheduler`, or on a local cluster of `workers` processes; finished jobs are skipped.
    Raise GridRunError naming every job that failed, once the others are written back."""
    results, reasons = [], {}
    for job in jobs:
        reason = start_job(job, folder, force)
        if reason is None:
            results.append(skipped(job))
            bar.update(1)
        else:
            reasons[job.name] = reason
    todo = [job for job in jobs if job.name in reasons]
    # Local workers keep their scratch folders in this outputs folder: a report killed midway leaves the
    # calls its running jobs recorded there, and the next run merges them instead of making them again.
    scratch_root = None if scheduler else folder.parent / ".dask-scratch"
    if scratch_root:
        _merge_leftovers(scratch_root)
    env = {"WORKBOOK_RECORD_MODE": settings().workbook_record_mode}
    if not scheduler:  # local models on one machine: its cores are shared between the jobs running at once
        env["WORKBOOK_THREADS"] = str(max(1, settings().workbook_threads // workers))
    if todo:
        with dask_client(scheduler, workers) as client:
            submit = partial(_submit, client, env=env, scratch_root=scratch_root)
            results += _run_tasks(submit, todo, reasons, folder, bar)
    return results


def _merge_leftovers(scratch_root: Path) -> None:
    from workbook.cassettes import merge_recordings  # here: workers import this module, and need no ADK

    scratch_root.mkdir(parents=True, exist_ok=True)
    for leftover in sorted(scratch_root.glob(f"{SCRATCH_PREFIX}*")):
        merge_recordings({path.name: path.read_text() for path in leftover.glob("recordings/*.jsonl")})
        shutil.rmtree(leftover)


def _submit(client: Client, job: NotebookJob, replay: dict[str, str], env: dict, scratch_root: Path | None) -> Future:
    return client.submit(run_job_on_worker, job, env, replay, scratch_root and str(scratch_root), pure=False)


def _run_tasks(submit: Callable, jobs: list[NotebookJob], reasons: dict, folder: Path, bar: tqdm) -> list[dict]:
    from distributed import as_completed

    from workbook.cassettes import merge_recordings, shared_recordings  # here: workers need no ADK

    runs = {submit(job, {}): (job, 1) for job in jobs}
    results, failures = [], []
    for future in (queue := as_completed(list(runs))):
        job, attempt = runs.pop(future)
        try:
            outcome = future.result()
        except Exception as error:  # a worker died or could not import the workbook
            failures.append(f"{job.name}: no Dask worker could run it ({first_line(error)})")
            bar.update(1)
            continue
        conflicts = merge_recordings(outcome.recordings)
        if conflicts and not outcome.error and attempt < ATTEMPTS:
            rerun = submit(job, shared_recordings(outcome.recordings))
            runs[rerun] = (job, attempt + 1)
            queue.add(rerun)
            continue
        problem = _write_back(job, outcome, folder, conflicts)
        if problem:
            failures.append(problem)
        results.append({"job": job.name, "status": "ran", "seconds": outcome.seconds, "reason": reasons[job.name]})
        bar.update(1)
    if failures:
        raise GridRunError(f"{len(failures)} report job(s) failed:\n" + "\n".join(f"  {f}" for f in failures))
    return results


def _write_back(job: NotebookJob, outcome: JobOutcome, folder: Path, conflicts: list) -> str:
    """Write a job's outputs and read log into this machine's outputs folder and mark it finished;
    return why it is not finished ("" when it is)."""
    for relative, content in outcome.files.items():
        target = folder.parent / relative  # folder is <outputs>/notebooks
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, content)
    read_log = folder / f"{job.name}.reads.jsonl"
    local_read_log(outcome.reads, read_log, folder.parent)
    inputs = input_record(read_log)
    where = f"{job.name} (worker {outcome.worker})"
    if outcome.error:
        return f"{where}: {outcome.error}\n  its notebook, run up to the failing cell: {folder / f'{job.name}.ipynb'}"
    if outcome.fingerprint != job_fingerprint(job):
        return (
            f"{where}: the worker's notebook or workbook code differs from this checkout's; check out this commit there"
        )
    differing = sorted(path for path, digest in outcome.file_digests.items() if inputs["files"].get(path) != digest)
    if differing:
        return f"{where}: the worker read other versions of {', '.join(differing[:3])}; check out this commit there"
    if conflicts:
        return f"{where}: its recordings met another job's {ATTEMPTS} times; run the report again to replay them"
    finish_job(job, folder, outcome.seconds, inputs)
    return ""


@contextmanager
def _main_module_left_out() -> Iterator[None]:
    """Start processes that do not import this process's __main__ module: a spawned process imports it
    again, and under `python -m helpers report` that is the whole workbook (seconds of CPU per worker,
    and slow to shut down), though a task needs only this module."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


@contextmanager
def dask_client(scheduler: str | None, workers: int) -> Iterator[Client]:
    """Yield a Dask client: of the scheduler at `scheduler` (which must have a worker), or of a local
    cluster of `workers` single-threaded processes, closed afterwards."""
    import dask
    from distributed import Client, LocalCluster

    if not scheduler:
        with _main_module_left_out(), dask.config.set(LOCAL_CLUSTER_CONFIG):
            cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,  # processes, not threads: one papermill job per process (grid.execute_job)
                host="127.0.0.1",  # loopback only
                dashboard_address=None,
                scheduler_kwargs={"dashboard_address": "127.0.0.1:0", "dashboard": False},  # default: 8787, any host
                silence_logs=logging.ERROR,  # the report names each failed job; the rest is distributed's chatter
            )
        with cluster, Client(cluster) as client:
            yield client
        return
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as error:
        raise GridRunError(
            f"WORKBOOK_DASK_SCHEDULER={scheduler}: no Dask scheduler answered ({first_line(error)}); start one "
            "with `.venv/bin/dask scheduler` and give its tcp://host:port, or unset it to run on this machine"
        ) from None
    with client:
        try:
            client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
        except TimeoutError:
            raise GridRunError(
                f"the Dask scheduler at {scheduler} has no worker after {CONNECT_TIMEOUT_S}s; start "
                f"`.venv/bin/dask worker {scheduler} --nthreads 1` on each machine (this commit checked out)"
            ) from None
        yield client
