"""Eval step three and the run store: rows become the tidy run table, written under outputs/runs/<run_id>/."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

import json
from pathlib import Path

from workbook.inputs import note_read
from workbook.settings import WorkbookError, runs_dir, settings
from workbook.util import atomic_write

RUN_COLUMNS = [
    "run_id", "repeat", "case", "invocation", "metric", "judge", "sample", "sample_verdict", "sample_score",
    "score", "status", "threshold", "rubric_verdicts", "rationale", "raw_reply", "user", "answer", "reference",
    "agent_model", "prompt_version", "agent_prompt_tokens", "agent_output_tokens", "agent_thinking_tokens",
    "agent_latency_s", "judge_prompt_tokens", "judge_output_tokens", "judge_latency_s", "replayed", "rubrics_seen",
    "tools_called", "sentence_labels", "p_yes",
]  # fmt: skip


def run_table(rows: list[dict], run_id: str, agent_model: str, prompt_version: str) -> pd.DataFrame:
    """Return judged rows as the run table: RUN_COLUMNS in order, sorted by repeat, case, invocation,
    metric and sample."""
    import pandas as pd

    table = pd.DataFrame(rows)
    table["run_id"], table["agent_model"], table["prompt_version"] = run_id, agent_model, prompt_version
    table = table.reindex(columns=RUN_COLUMNS)
    return table.sort_values(["repeat", "case", "invocation", "metric", "sample"], kind="stable").reset_index(drop=True)


def write_run(table: pd.DataFrame, meta: dict) -> Path:
    """Write a run's table (CSV) and meta.json atomically under outputs/runs/<run_id>/; return the folder."""
    folder = runs_dir() / meta["run_id"]
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / "table.csv", table.to_csv(index=False))
    atomic_write(folder / "meta.json", json.dumps(meta, indent=2, default=str))
    return folder


def read_runs(pattern: str = "*") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Return (tables concatenated, metas as a table) for every complete run under outputs/runs.

    A folder with a meta.json but no table.csv (a notebook's findings.csv, or a run still being written)
    is not a run table and is left out.
    """
    import pandas as pd

    tables, metas = [], []
    note_read(runs_dir())  # a new run changes what the report shows
    for meta_path in sorted(runs_dir().glob(f"{pattern}/meta.json")):
        if not meta_path.with_name("table.csv").exists():
            continue
        note_read(meta_path)  # the report reruns when a run it read was rerun
        note_read(meta_path.with_name("table.csv"))
        meta = json.loads(meta_path.read_text())
        tables.append(pd.read_csv(meta_path.with_name("table.csv")))
        metas.append(meta)
    if not tables:
        raise WorkbookError(f"no complete runs under {runs_dir()} matching {pattern!r}: run the eval notebooks first")
    return pd.concat(tables, ignore_index=True), pd.DataFrame(metas)


def provenance() -> dict:
    """Return the meta.json fields saying which ADK version and which record mode made a run."""
    import google.adk

    return {"adk_version": google.adk.__version__, "record_mode": settings().workbook_record_mode}
