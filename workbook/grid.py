"""The report grid (`make report`): papermill runs every notebook job, skips finished ones, exports HTML."""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from workbook.grid_file import DEFAULT_GRID, NOTEBOOKS, NotebookJob, grid_jobs, import_papermill, read_grid_file
from workbook.inputs import READ_LOG_VARIABLE, changed_inputs, input_record
from workbook.quiet import BatchKernelManager
from workbook.settings import REPO, GridRunError, outputs_dir, settings
from workbook.util import atomic_write, environment, now, progress

if TYPE_CHECKING:
    from tqdm.auto import tqdm

# The one kernel name: the notebooks' kernelspec, papermill, the lab test and `make` (ipykernel install).
KERNEL_NAME = "python3"


def run_grid(
    grid_file: str | Path = DEFAULT_GRID, force: bool = False, workers: int | None = None, scheduler: str | None = None
) -> list[dict]:
    """Execute every job of the grid with papermill, skipping finished ones; return what happened
    (job, status, why it ran, seconds), in the grid's order.

    A job is finished when its .done.json matches the notebook's current content and parameters,
    the workbook's code, and every data file and recording the job read when it ran (see
    workbook.inputs). An interrupted job has no .done.json and runs again; its model calls replay
    from the cassettes. The grid file is validated before any job runs.

    Independent jobs run `workers` at a time (default WORKBOOK_GRID_WORKERS: the machine's cores) on a
    local Dask cluster, or on the workers of the Dask scheduler at `scheduler` (default
    WORKBOOK_DASK_SCHEDULER; see workbook.grid_dask); with one worker and no scheduler, one after
    another in this process. The report notebook runs last, here: it reads every other job's tables.
    """
    folder = outputs_dir() / "notebooks"
    folder.mkdir(parents=True, exist_ok=True)
    jobs = grid_jobs(grid_file)
    scheduler = scheduler or settings().workbook_dask_scheduler
    workers = settings().workbook_grid_workers if workers is None else workers
    if workers < 1:
        raise GridRunError(f"report workers: {workers}; give 1 or more (--workers, WORKBOOK_GRID_WORKERS)")
    first = [job for job in jobs if not job.after_others]
    bar = progress(total=len(jobs), desc="report grid", unit="notebook")
    try:
        if scheduler or workers > 1:
            from workbook.grid_dask import run_on_dask

            results = run_on_dask(first, folder, force, bar, scheduler=scheduler, workers=workers)
        else:
            results = [_run_here(job, folder, force, bar) for job in first]
        results += [_run_here(job, folder, force, bar) for job in jobs if job.after_others]
    finally:
        bar.close()
    order = [job.name for job in jobs]
    return sorted(results, key=lambda result: order.index(result["job"]))


def _run_here(job: NotebookJob, folder: Path, force: bool, bar: tqdm) -> dict:
    result = _run_job(job, folder, force)
    bar.update(1)
    return result


# The report's own CSS: wide tables scroll inside their output instead of widening the page; text cells read left.
_REPORT_CSS = """
.jp-OutputArea-output { overflow-x: auto; max-width: 100%; }
.jp-OutputArea-output table { margin-left: 0; }
:not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon :is(td, th) { text-align: left; }
.jp-OutputArea-output img { max-width: 100%; height: auto; }
"""


def export_report(executed: str | Path | None = None, target: str | Path | None = None) -> Path:
    """Write the executed comparison notebook as a standalone HTML report (code hidden, figures inline,
    cells tagged `notebook-only` dropped, wide tables scrolling); return its path."""
    import nbformat
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor

    executed = Path(executed or outputs_dir() / "notebooks" / "05_comparison_report.ipynb")
    target = Path(target or outputs_dir() / "report.html")
    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    exporter.register_preprocessor(TagRemovePreprocessor(remove_cell_tags={"notebook-only"}), enabled=True)
    resources = {"metadata": {"name": "Comparison report"}}
    body, _ = exporter.from_notebook_node(nbformat.read(executed, as_version=4), resources=resources)
    atomic_write(target, body.replace("</head>", f"<style>{_REPORT_CSS}</style>\n</head>", 1))
    return target


def report_main(argv: list[str] | None = None) -> None:
    """`make report`: run the grid (replaying recordings unless LIVE=1) and write outputs/report.html;
    `python -m helpers report [grid.yaml] [--force] [--workers N] [--scheduler tcp://host:port]`."""
    parser = argparse.ArgumentParser(prog="python -m helpers report", description=report_main.__doc__)
    parser.add_argument("grid_file", nargs="?", default=str(DEFAULT_GRID), help="the grid YAML")
    parser.add_argument("--force", action="store_true", help="rerun finished jobs too")
    parser.add_argument("--workers", type=int, help="jobs at once on this machine (default: its cores; 1: serial)")
    parser.add_argument("--scheduler", help="a Dask scheduler's address: run the jobs on its workers")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results = run_grid(args.grid_file, force=args.force, workers=args.workers, scheduler=args.scheduler)
    for result in results:
        why = f"  ({result['reason']})" if result.get("reason") else ""
        print(f"  {result['status']:<26} {result['seconds']:>7.1f}s  {result['job']}{why}")
    report = read_grid_file(Path(args.grid_file)).get("report")
    if report:
        path = export_report(outputs_dir() / "notebooks" / f"{Path(report).stem}.ipynb")
        print(f"Report written in {time.perf_counter() - started:.0f}s: {path}")


def job_fingerprint(job: NotebookJob) -> str:
    """Return what decides whether a finished job is still current: its parameters, its notebook,
    and every source file of the workbook (helpers.py and the workbook package)."""
    code = [REPO / "helpers.py", *sorted((REPO / "workbook").rglob("*.py"))]
    payload = json.dumps(job.parameters, sort_keys=True).encode() + (NOTEBOOKS / job.notebook).read_bytes()
    for path in code:
        payload += str(path.relative_to(REPO)).encode() + path.read_bytes()
    return hashlib.sha256(payload).hexdigest()[:16]


def rerun_reason(job: NotebookJob, folder: Path) -> str | None:
    """Return why a job must run (never ran, its notebook or code changed, an input it read changed),
    or None when its .done.json in `folder` is current and `make report` skips it."""
    marker = folder / f"{job.name}.done.json"
    if not marker.exists():
        return "not finished before"
    done = json.loads(marker.read_text())
    if done.get("fingerprint") != job_fingerprint(job):
        return "notebook, parameters or workbook code changed"
    if "inputs" not in done:
        return "finished before inputs were tracked"
    changed = changed_inputs(done["inputs"])
    if changed:
        return "changed: " + ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    return None


def start_job(job: NotebookJob, folder: Path, force: bool) -> str | None:
    """Return why a job runs now, its finished marker and read log removed (so an interruption leaves it
    unfinished), or None when it is finished and current (`force` reruns it anyway)."""
    reason = "forced" if force else rerun_reason(job, folder)
    if reason is not None:
        (folder / f"{job.name}.done.json").unlink(missing_ok=True)
        (folder / f"{job.name}.reads.jsonl").unlink(missing_ok=True)
    return reason


def skipped(job: NotebookJob) -> dict:
    """Return the result row of a job skipped because it is finished and current."""
    return {"job": job.name, "status": "skipped (finished earlier)", "seconds": 0.0, "reason": ""}


def finish_job(job: NotebookJob, folder: Path, seconds: float, inputs: dict) -> None:
    """Write the job's .done.json (the marker that it finished): its fingerprint and what it read
    (`input_record` of its read log)."""
    done = {"fingerprint": job_fingerprint(job), "finished": now(), "seconds": seconds, "inputs": inputs}
    atomic_write(folder / f"{job.name}.done.json", json.dumps(done, indent=1))


# papermill changes the process's working folder and its kernel inherits the process's environment:
# one job at a time per process (a Dask worker with several threads runs its jobs one after another).
_ONE_JOB_AT_A_TIME = threading.Lock()


def execute_job(job: NotebookJob, output: Path, **env: str) -> float:
    """Return the seconds papermill took to execute a job's notebook into `output` in a batch kernel
    that sees `env` (the read log, and for a Dask worker its scratch folders) over this process's."""
    papermill = import_papermill()
    with _ONE_JOB_AT_A_TIME, environment(**env):
        started = time.perf_counter()
        papermill.execute_notebook(
            str(NOTEBOOKS / job.notebook),
            str(output),
            parameters=job.parameters,
            kernel_name=KERNEL_NAME,
            cwd=str(NOTEBOOKS),
            progress_bar=False,
            kernel_manager_class=BatchKernelManager,  # no TCP warning, no stale progress bars
        )
        return round(time.perf_counter() - started, 1)


def _run_job(job: NotebookJob, folder: Path, force: bool) -> dict:
    reason = start_job(job, folder, force)
    if reason is None:
        return skipped(job)
    read_log = folder / f"{job.name}.reads.jsonl"  # the kernel notes every data file and recording it reads
    seconds = execute_job(job, folder / f"{job.name}.ipynb", **{READ_LOG_VARIABLE: str(read_log)})
    finish_job(job, folder, seconds, input_record(read_log))
    return {"job": job.name, "status": "ran", "seconds": seconds, "reason": reason}
