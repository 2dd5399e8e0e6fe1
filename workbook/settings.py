"""Workbook settings (read once, refreshed explicitly) and the errors a user can hit."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data"

RecordMode = Literal["auto", "replay", "live", "plan"]  # plan: count misses, call nothing


class WorkbookError(Exception):
    """An error a workbook user can fix; the message says how."""


class MissingModelError(WorkbookError):
    """A local model's weights are not installed or do not match their pinned hash."""


class CredentialsError(WorkbookError):
    """A Gemini model was asked for without credentials."""


class ReplayMissError(WorkbookError):
    """Strict replay found no recording for a request."""


class EvalFileError(WorkbookError):
    """An evalset or config file is malformed; the message names file, JSON path and problem."""


class EvalLintError(EvalFileError):
    """An evalset + config pair has lint errors, so run_eval stopped before any model call."""


class IncompleteRunError(WorkbookError):
    """A run could not compute some results (a failed inference, judge call or replay miss); the
    message lists each case, metric and cause."""


class BatteryError(WorkbookError):
    """A battery YAML file does not match the expected schema."""


class LabelFileError(WorkbookError):
    """A label CSV file lacks its header or holds a row edited by hand; the message names file and line."""


class GridFileError(WorkbookError):
    """The report grid file is malformed; the message names file, key or line and the fix."""


class GridRunError(WorkbookError):
    """Report jobs failed, or a Dask scheduler or worker could not run them; the message names each
    job or address, what went wrong and what to do."""


class Settings(BaseSettings):
    """Workbook settings, read from the environment and an optional .env file."""

    model_config = SettingsConfigDict(env_file=REPO / ".env", extra="ignore")

    google_api_key: SecretStr | None = None
    google_genai_use_vertexai: bool = False
    google_cloud_project: str | None = None
    google_cloud_location: str | None = None
    gemini_base_url: str | None = None  # only to point google-genai at a local stub
    default_model: str = "local/qwen-1.5b"
    workbook_record_mode: RecordMode = "auto"
    workbook_recordings: Path = DATA / "recordings"
    # A Dask worker records new calls here (a scratch folder read over workbook_recordings) and the
    # client merges them into the shared cassettes: no worker writes those itself.
    workbook_record_into: Path | None = None
    workbook_labels: Path = DATA / "labels"  # human labels, one <battery>.csv each
    workbook_model_cache: Path = Path.home() / ".cache" / "adk-eval-workbook"
    workbook_gguf: Path | None = None  # the file behind `local/custom`
    workbook_outputs: Path = REPO / "outputs"  # executed notebooks, run tables, report.html
    workbook_adk_agents: Path = REPO / "agents"  # ADK agent packages: adk web reads eval sets and history there
    workbook_progress: bool = True  # progress bars; batch kernels (make report, tests) set it off
    workbook_threads: int = max(1, os.cpu_count() or 1)
    workbook_grid_workers: int = max(1, os.cpu_count() or 1)  # report jobs run at once (1: one after another)
    workbook_dask_scheduler: str | None = None  # tcp://host:port: run report jobs on that Dask cluster's workers
    workbook_n_ctx: int = 8192
    # Saved llama.cpp prompt states (workbook/prompt_cache.py): the folder (default: prompt-cache in the
    # model cache) and its bound; 0 saves and restores none.
    workbook_prompt_cache: Path | None = None
    workbook_prompt_cache_mib: int = Field(2048, ge=0)
    # The local rubric judge's output format (workbook/judge_formats.py): v1 is what the committed
    # recordings hold; v2 bounds each block's Evidence and Rationale to these many characters.
    workbook_judge_format: Literal["v1", "v2"] = "v1"
    workbook_judge_evidence_chars: int = Field(40, ge=1)
    workbook_judge_rationale_chars: int = Field(64, ge=1)


_current: Settings | None = None


def settings() -> Settings:
    """Return the settings, read from the environment and .env on first use (see `refresh_settings`)."""
    return _current or refresh_settings()


def refresh_settings() -> Settings:
    """Return the settings read afresh from the environment and .env (call it after changing either)."""
    global _current
    _current = Settings()
    return _current


def use_record_mode(mode: str = "") -> str:
    """Return the record mode now in force, after setting it for this process ('' keeps WORKBOOK_RECORD_MODE)."""
    return _use_setting("WORKBOOK_RECORD_MODE", mode, ("auto", "replay", "live", "plan")).workbook_record_mode


def use_judge_format(version: str = "") -> str:
    """Return the local judge format now in force, after setting it for this process ('' keeps
    WORKBOOK_JUDGE_FORMAT): 'v1' (the committed recordings) or 'v2' (bounded rubric blocks)."""
    return _use_setting("WORKBOOK_JUDGE_FORMAT", version, ("v1", "v2")).workbook_judge_format


def _use_setting(variable: str, value: str, allowed: tuple[str, ...]) -> Settings:
    # Through the environment, so papermill kernels and other child processes inherit the choice.
    if value:
        if value not in allowed:
            raise WorkbookError(f"{variable.lower().removeprefix('workbook_')} must be one of {allowed}, not {value!r}")
        os.environ[variable] = value
    return refresh_settings()


def outputs_dir() -> Path:
    """Return the folder for everything a run writes (WORKBOOK_OUTPUTS, default outputs/)."""
    return settings().workbook_outputs


def labels_dir() -> Path:
    """Return the folder of human label files (WORKBOOK_LABELS, default data/labels/)."""
    return settings().workbook_labels


def runs_dir() -> Path:
    """Return the folder holding one sub-folder per run: table.csv and meta.json."""
    return outputs_dir() / "runs"
