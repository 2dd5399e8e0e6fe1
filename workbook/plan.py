"""A plan before a run (`python -m helpers plan`, `make plan`): what would replay and what is missing per
model, with the live minutes the missing calls would take, without calling any model.

The notebooks run with papermill in record mode `plan` (workbook.planning) into a temporary folder: a
recorded call replays, a missing one is counted and answered with a marked placeholder that is never
written to a cassette. For the report grid, jobs that `make report` would skip are not run. Live
minutes are the missing calls times the mean recorded `latency_s` of the same model and kind of call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

import argparse
import json
import shutil
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from workbook.grid import KERNEL_NAME, rerun_reason
from workbook.grid_file import DEFAULT_GRID, NOTEBOOKS, NotebookJob, grid_jobs
from workbook.judge_formats import reply_kind
from workbook.planning import PLAN_LOG_VARIABLE
from workbook.quiet import BatchKernelManager
from workbook.settings import GridFileError, outputs_dir, settings
from workbook.util import environment, shown_path


@dataclass
class Plan:
    """What a run would do: one row per job, and every model call the planned jobs would make."""

    target: str
    jobs: list[dict] = field(default_factory=list)  # job, state, and for planned jobs replays, missing, error
    calls: list[dict] = field(default_factory=list)  # one note per call (workbook.planning), with its job


def plan_run(target: str | Path | None = None, parameters: dict | None = None, everything: bool = False) -> Plan:
    """Return the plan for the report grid (default, or a grid YAML) or for one notebook with parameters,
    made by running the notebooks in record mode `plan`: no model is called, nothing is recorded.

    For a grid, jobs that `make report` would skip (finished, inputs unchanged) are not run unless
    `everything` is set.
    """
    target = Path(target or DEFAULT_GRID)
    if target.suffix in (".yaml", ".yml"):
        jobs, reasons = _grid_reasons(target, everything)
    elif target.suffix == ".ipynb":
        notebook = target if target.is_file() else NOTEBOOKS / target.name
        if not notebook.is_file():
            raise GridFileError(f"{target}: no such notebook (notebooks/ has the course's notebooks)")
        jobs = [NotebookJob(str(notebook.resolve()), dict(parameters or {}), notebook.stem)]
        reasons = {jobs[0].name: "asked for"}
    else:
        raise GridFileError(f"{target}: plan a grid file (.yaml) or a notebook (.ipynb)")
    plan = Plan(shown_path(target))
    with tempfile.TemporaryDirectory(prefix="workbook-plan-") as scratch:
        outputs = Path(scratch) / "outputs"
        if (outputs_dir() / "runs").is_dir():  # the report notebook reads the runs of earlier jobs
            shutil.copytree(outputs_dir() / "runs", outputs / "runs")
        for job in jobs:
            if reasons[job.name] is None:
                plan.jobs.append({"job": job.name, "state": "skipped: finished, inputs unchanged"})
                continue
            calls, error = _plan_job(job, outputs, Path(scratch) / f"{job.name}.plan.jsonl")
            plan.calls += [{**call, "job": job.name} for call in calls]
            hits = sum(call["hit"] for call in calls)
            row = {"job": job.name, "state": f"would run ({reasons[job.name]})", "replays": hits}
            plan.jobs.append(row | {"missing": len(calls) - hits, "error": error})
    return plan


def plan_summary(plan: Plan) -> pd.DataFrame:
    """Return one row per (model, kind of call): replays, missing, missing that depend on another
    missing answer, the mean recorded seconds per call used, and the estimated live minutes."""
    import pandas as pd

    latencies = recorded_latencies(settings().workbook_recordings)
    rows = []
    counts: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for call in plan.calls:
        counts[(call["model"], call["kind"])].append(call)
    for (model, kind), calls in sorted(counts.items()):
        missing = [call for call in calls if not call["hit"]]
        seconds, basis = _mean_latency(latencies, model, kind)
        rows.append(
            {
                "model": model,
                "kind": kind,
                "replays": len(calls) - len(missing),
                "missing": len(missing),
                "of them after a missing answer": sum(call["depends"] for call in missing),
                "s per call": round(seconds, 1) if seconds is not None else None,
                "estimated from": basis,
                "live min": round(len(missing) * seconds / 60, 1) if seconds is not None else None,
            }
        )
    return pd.DataFrame(rows)


def recorded_latencies(directory: Path) -> dict[tuple[str, str], list[float]]:
    """Return the recorded latency_s of every call in a cassette folder, by (model, kind of call)."""
    found: dict[tuple[str, str], list[float]] = defaultdict(list)
    for cassette in sorted(Path(directory).glob("*.jsonl")):
        for line in cassette.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
                reply = entry["reply"]
                found[(entry["model"], reply_kind(reply.get("text", "")))].append(float(reply["latency_s"]))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue  # a malformed line costs nothing to plan
    return found


def format_plan(plan: Plan) -> str:
    """Return the plan as text: jobs, the table per model and kind, the first missing calls, and how
    the estimates were made."""
    import pandas as pd

    summary = plan_summary(plan)
    lines = [f"Plan for {plan.target} (record mode plan: no model was called, nothing was recorded)", ""]
    lines += [pd.DataFrame(plan.jobs).fillna("").to_string(index=False), ""]
    if summary.empty:
        return "\n".join([*lines, "No job would call a model: everything is finished and current."])
    lines += [summary.to_string(index=False), ""]
    missing = [call for call in plan.calls if not call["hit"]]
    known = summary["live min"].dropna()
    lines.append(
        f"Total: {int(summary.replays.sum())} calls replay, {len(missing)} are missing"
        + (f", about {known.sum():.1f} live minutes on this machine's recorded speed." if len(missing) else ".")
    )
    if missing:
        lines += ["", "Missing calls (first 10): model, kind, digest, occurrence, prompt begins"]
        lines += [
            f"  {c['model']:<20} {c['kind']:<10} {c['digest']} #{c['occurrence']:<3} {'*' if c['depends'] else ' '} "
            f"{c['prompt_head'][:70]}"
            for c in missing[:10]
        ]
        lines += [
            "",
            "* Calls after a missing answer (a judge grading it, a later turn that follows it) were made with a",
            "  marked placeholder in its place: their number and minutes are estimated from that placeholder.",
            "Record them with `make report LIVE=1` (or WORKBOOK_RECORD_MODE=auto), then commit data/recordings.",
        ]
    errors = [row for row in plan.jobs if row.get("error")]
    lines += [f"{row['job']} stopped early, so its count is partial: {row['error']}" for row in errors]
    return "\n".join(lines)


def plan_main(argv: list[str] | None = None) -> None:
    """`python -m helpers plan [grid.yaml | notebook.ipynb] [-p NAME VALUE]... [--all]`: print the plan."""
    import yaml

    parser = argparse.ArgumentParser(prog="python -m helpers plan", description=plan_main.__doc__)
    parser.add_argument("target", nargs="?", default=None, help="a grid YAML (default: the report grid) or a notebook")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    parser.add_argument("--all", action="store_true", help="plan finished grid jobs too")
    args = parser.parse_args(argv)
    parameters = {name: yaml.safe_load(value) for name, value in args.parameter}
    print(format_plan(plan_run(args.target, parameters, everything=args.all)))


def _grid_reasons(grid_file: Path, everything: bool) -> tuple[list[NotebookJob], dict[str, str | None]]:
    """The grid's jobs and why each would run (None: `make report` skips it)."""
    jobs, folder = grid_jobs(grid_file), outputs_dir() / "notebooks"
    reasons: dict[str, str | None] = {}
    for job in jobs:
        reason = "--all" if everything else rerun_reason(job, folder)
        if reason is None and any(reasons.values()) and _reads_runs(folder / f"{job.name}.done.json"):
            reason = "reads the run tables of the jobs above"
        reasons[job.name] = reason
    return jobs, reasons


def _reads_runs(marker: Path) -> bool:
    runs = str(outputs_dir() / "runs")
    inputs = json.loads(marker.read_text()).get("inputs", {}) if marker.exists() else {}
    return any(path.startswith(runs) or path.startswith("outputs/runs") for path in inputs.get("files", {}))


def _plan_job(job: NotebookJob, outputs: Path, log: Path) -> tuple[list[dict], str]:
    """Run one job in plan mode; return its call notes and the error that stopped it ('' if none)."""
    import papermill

    parameters = {name: value for name, value in job.parameters.items() if name != "record_mode"}
    variables = {"WORKBOOK_RECORD_MODE": "plan", PLAN_LOG_VARIABLE: str(log), "WORKBOOK_OUTPUTS": str(outputs)}
    error = ""
    with environment(**variables):
        try:
            papermill.execute_notebook(
                str(NOTEBOOKS / job.notebook),
                str(log.with_suffix(".ipynb")),
                parameters=parameters,
                kernel_name=KERNEL_NAME,
                cwd=str(NOTEBOOKS),
                progress_bar=False,
                kernel_manager_class=BatchKernelManager,  # the report's quiet batch kernel
            )
        except papermill.PapermillExecutionError as failure:
            error = f"cell {failure.exec_count}: {failure.ename}: {str(failure.evalue)[:300]}"
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return [json.loads(line) for line in lines if line.strip()], error


def _mean_latency(latencies: dict, model: str, kind: str) -> tuple[float | None, str]:
    same = latencies.get((model, kind), [])
    if same:
        return sum(same) / len(same), f"{len(same)} recorded {kind} calls"
    anything = [value for (other, _), values in latencies.items() if other == model for value in values]
    if anything:
        return sum(anything) / len(anything), f"{len(anything)} recorded calls of any kind"
    return None, "no recording of this model: unknown"
