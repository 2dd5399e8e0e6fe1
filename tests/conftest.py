import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import helpers  # noqa: E402


@pytest.fixture
def recordings(tmp_path, monkeypatch):
    """An empty cassette directory in `auto` mode, with occurrence counters reset."""
    monkeypatch.setenv("WORKBOOK_RECORDINGS", str(tmp_path / "recordings"))
    monkeypatch.setenv("WORKBOOK_RECORD_MODE", "auto")
    helpers.reset_occurrences()
    yield tmp_path / "recordings"
    helpers.reset_occurrences()


def set_mode(monkeypatch, mode: str) -> None:
    monkeypatch.setenv("WORKBOOK_RECORD_MODE", mode)
    helpers.reset_occurrences()
