"""The report grid (`make report`): papermill runs every notebook job, skips finished ones, exports HTML."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbook.settings import DATA, REPO, WorkbookError, outputs_dir
from workbook.util import atomic_write, now, progress

NOTEBOOKS = REPO / "notebooks"
# The one kernel name: the notebooks' kernelspec, papermill, the lab test and `make` (ipykernel install).
KERNEL_NAME = "python3"
_SECRET_NAMES = re.compile(r"key|token|secret|password|credential", re.I)


@dataclass(frozen=True)
class NotebookJob:
    """One papermill execution: a notebook, its parameters, and where its output goes."""

    notebook: str
    parameters: dict
    name: str  # output stem under outputs/notebooks/


def grid_jobs(grid_file: str | Path = DATA / "report_grid.yaml") -> list[NotebookJob]:
    """Return the notebook runs that `make report` executes, in order, from the grid YAML."""
    import yaml

    path = Path(grid_file)
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    jobs = [NotebookJob(name, {}, Path(name).stem) for name in spec.get("teaching_notebooks", [])]
    grid = spec.get("grid")
    if grid:
        keys = list(grid["vary"])
        for values in itertools.product(*(grid["vary"][key] for key in keys)):
            parameters = {**grid.get("fixed", {}), **dict(zip(keys, values, strict=True))}
            slug = "__".join(f"{key}={_slug(value)}" for key, value in zip(keys, values, strict=True))
            parameters["run_id"] = f"grid__{slug}"
            jobs.append(NotebookJob(grid["notebook"], parameters, f"{Path(grid['notebook']).stem}__{slug}"))
    for job in jobs:
        _check_job(path, job)
    if spec.get("report"):
        jobs.append(NotebookJob(spec["report"], {}, Path(spec["report"]).stem))
    return jobs


def run_grid(grid_file: str | Path = DATA / "report_grid.yaml", force: bool = False) -> list[dict]:
    """Execute every job of the grid with papermill, skipping finished ones; return what happened.

    A job is finished when its .done.json matches the notebook's current content and parameters
    and the workbook's code. An interrupted job has no .done.json and runs again; its model calls
    replay from the cassettes.
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


def _check_job(path: Path, job: NotebookJob) -> None:
    secret = [name for name in job.parameters if _SECRET_NAMES.search(name)]
    if secret:
        raise WorkbookError(
            f"{path}: parameter {secret[0]!r} looks like a secret; put secrets in .env, never in the grid"
        )
    if not (NOTEBOOKS / job.notebook).exists():
        raise WorkbookError(f"{path}: notebook {job.notebook!r} is not in notebooks/")


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", str(value).removeprefix("local/")).strip("-")
