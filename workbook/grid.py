"""The report grid (`make report`): papermill runs every notebook job, skips finished ones, exports HTML."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from workbook.grid_file import DEFAULT_GRID, NOTEBOOKS, NotebookJob, grid_jobs
from workbook.settings import REPO, outputs_dir
from workbook.util import atomic_write, now, progress

# The one kernel name: the notebooks' kernelspec, papermill, the lab test and `make` (ipykernel install).
KERNEL_NAME = "python3"


def run_grid(grid_file: str | Path = DEFAULT_GRID, force: bool = False) -> list[dict]:
    """Execute every job of the grid with papermill, skipping finished ones; return what happened.

    A job is finished when its .done.json matches the notebook's current content and parameters
    and the workbook's code. An interrupted job has no .done.json and runs again; its model calls
    replay from the cassettes. The grid file is validated before any job runs.
    """
    folder = outputs_dir() / "notebooks"
    folder.mkdir(parents=True, exist_ok=True)
    jobs = grid_jobs(grid_file)
    results = []
    bar = progress(total=len(jobs), desc="report grid")
    try:
        for job in jobs:
            results.append(_run_job(job, folder, force))
            bar.update(1)
    finally:
        bar.close()
    return results


def export_report(executed: str | Path | None = None, target: str | Path | None = None) -> Path:
    """Write the executed comparison notebook as a standalone HTML report (code hidden, figures inline);
    return its path."""
    import nbformat
    from nbconvert import HTMLExporter

    executed = Path(executed or outputs_dir() / "notebooks" / "05_comparison_report.ipynb")
    target = Path(target or outputs_dir() / "report.html")
    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(nbformat.read(executed, as_version=4))
    atomic_write(target, body)
    return target


def report_main() -> None:
    """`make report`: run the grid (replaying recordings unless LIVE=1) and write outputs/report.html."""
    started = time.perf_counter()
    results = run_grid()
    path = export_report()
    for result in results:
        print(f"  {result['status']:<26} {result['seconds']:>7.1f}s  {result['job']}")
    print(f"Report written in {time.perf_counter() - started:.0f}s: {path}")


def job_fingerprint(job: NotebookJob) -> str:
    """Return what decides whether a finished job is still current: its parameters, its notebook,
    and every source file of the workbook (helpers.py and the workbook package)."""
    code = [REPO / "helpers.py", *sorted((REPO / "workbook").rglob("*.py"))]
    payload = json.dumps(job.parameters, sort_keys=True).encode() + (NOTEBOOKS / job.notebook).read_bytes()
    for path in code:
        payload += str(path.relative_to(REPO)).encode() + path.read_bytes()
    return hashlib.sha256(payload).hexdigest()[:16]


def _run_job(job: NotebookJob, folder: Path, force: bool) -> dict:
    import papermill

    output, marker = folder / f"{job.name}.ipynb", folder / f"{job.name}.done.json"
    fingerprint = job_fingerprint(job)
    if not force and marker.exists() and json.loads(marker.read_text()).get("fingerprint") == fingerprint:
        return {"job": job.name, "status": "skipped (finished earlier)", "seconds": 0.0}
    marker.unlink(missing_ok=True)
    started = time.perf_counter()
    papermill.execute_notebook(
        str(NOTEBOOKS / job.notebook),
        str(output),
        parameters=job.parameters,
        kernel_name=KERNEL_NAME,
        cwd=str(NOTEBOOKS),
        progress_bar=False,
    )
    seconds = round(time.perf_counter() - started, 1)
    atomic_write(marker, json.dumps({"fingerprint": fingerprint, "finished": now(), "seconds": seconds}))
    return {"job": job.name, "status": "ran", "seconds": seconds}
