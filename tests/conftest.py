from pathlib import Path

import pytest

import helpers

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def adk_agents_elsewhere(tmp_path_factory):
    """Every run_eval writes ADK's EvalSetResult into an agents folder: in tests, a temporary one
    (WORKBOOK_ADK_AGENTS, inherited by papermill kernels and adk subprocesses), never agents/."""
    patch = pytest.MonkeyPatch()
    patch.setenv("WORKBOOK_ADK_AGENTS", str(tmp_path_factory.mktemp("adk_agents")))
    helpers.refresh_settings()
    yield
    patch.undo()


@pytest.fixture(autouse=True)
def fresh_settings():
    """Settings are read once per process: re-read them around each test, whose env may differ."""
    helpers.refresh_settings()
    yield
    helpers.refresh_settings()


@pytest.fixture
def recordings(tmp_path, monkeypatch):
    """An empty cassette directory in `auto` mode, with occurrence counters reset."""
    setenv(monkeypatch, WORKBOOK_RECORDINGS=str(tmp_path / "recordings"), WORKBOOK_RECORD_MODE="auto")
    helpers.reset_occurrences()
    yield tmp_path / "recordings"
    helpers.reset_occurrences()


def setenv(monkeypatch, **values: str) -> None:
    """Set environment variables for one test and re-read the settings."""
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    helpers.refresh_settings()


def set_mode(monkeypatch, mode: str) -> None:
    setenv(monkeypatch, WORKBOOK_RECORD_MODE=mode)
    helpers.reset_occurrences()
