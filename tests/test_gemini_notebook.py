"""Notebook 01 on the Gemini path, against the loopback stub (tests/gemini_stub.py): it records in auto
mode like the local path, strict replay with the stub stopped (and no key) gives the same outputs, and
the notebook's thinking budgets are what reaches the stub. The dummy key reaches the stub's headers
and nothing else: no notebook output, no recording."""

import json
import re

import nbformat
from conftest import setenv
from gemini_stub import GeminiStub
from notebook_runner import outputs_text, run_notebook, stderr_outputs

import helpers

NOTEBOOK = "01_build_the_archivist.ipynb"
SECRET = "AIzaDUMMY-not-a-real-key-0000000000"
BUDGETS = [64, 512]
ANSWER_CELLS = ("c13", "c17", "c20", "c23")  # both versions' answers, the chat, costs, the thinking sweep


def _reply(number: int, body: dict) -> str:
    """A different reply for every request, so replay has to give back each one in its place."""
    question = body["contents"][-1]["parts"][0]["text"]
    return f"Stub answer {number} to: {question[:40]}"


def _cell_text(notebook: nbformat.NotebookNode, cell_id: str) -> str:
    """Return what a cell's outputs show: tags, styled tables' random ids and object addresses left out."""
    cell = next(cell for cell in notebook.cells if cell.get("id") == cell_id)
    text = outputs_text(nbformat.v4.new_notebook(cells=[cell]))
    return " ".join(re.sub(r"(?s)<style.*?</style>|<[^>]*>| at 0x[0-9a-f]+", " ", text).split())


def _run(tmp_path, folder: str, mode: str) -> nbformat.NotebookNode:
    (tmp_path / folder).mkdir()
    parameters = {"model": "gemini-2.5-flash", "thinking_budgets": BUDGETS, "record_mode": mode}
    return run_notebook(NOTEBOOK, tmp_path / folder, **parameters)


def test_notebook_01_on_gemini_records_then_replays_with_the_stub_stopped(tmp_path, monkeypatch):
    recordings = tmp_path / "recordings"
    stub = GeminiStub(reply_for=_reply)
    setenv(monkeypatch, GOOGLE_API_KEY=SECRET, GEMINI_BASE_URL=stub.url, WORKBOOK_RECORDINGS=str(recordings))
    try:
        recorded = _run(tmp_path, "record", "auto")
    finally:
        stub.close()
    assert len(stub.requests) == 12 + 3 + len(BUDGETS)  # 6 questions x 2 versions, 3 chat turns, the sweep
    assert all(request["headers"].get("x-goog-api-key") == SECRET for request in stub.requests)
    thinking = [r["body"].get("generationConfig", {}).get("thinkingConfig") for r in stub.requests]
    sent = [config.get("thinkingBudget", config.get("thinking_budget")) for config in thinking if config]
    assert sent == BUDGETS, thinking  # the notebook's parameter, as google-genai sent it

    monkeypatch.delenv("GOOGLE_API_KEY")
    helpers.refresh_settings()
    replayed = _run(tmp_path, "replay", "replay")  # the stub is stopped: a miss would fail the run
    for cell_id in ANSWER_CELLS:
        assert _cell_text(replayed, cell_id) == _cell_text(recorded, cell_id), cell_id
    assert "Stub answer 0 to: Who is Blurryface?" in _cell_text(replayed, "c13")
    assert "Of 12 answers, 0 were replayed" in outputs_text(recorded)
    assert "Of 12 answers, 12 were replayed" in outputs_text(replayed)
    sweep = _cell_text(replayed, "c23")
    assert "Thinking tokens for the same question on `gemini-2.5-flash`: 5 at budget 64, 5 at budget 512" in sweep
    for notebook in (recorded, replayed):
        assert stderr_outputs(notebook) == []
        assert SECRET not in json.dumps(notebook)
    written = "".join(path.read_text() for path in recordings.glob("*.jsonl"))
    assert "gemini-2.5-flash" in written and SECRET not in written


def test_only_gemini_25_and_later_count_as_thinking_models():
    """Notebook 01 sweeps thinking budgets only where they change something (its offline text is
    checked in test_archivist, on the notebook's default local run)."""
    assert helpers.supports_thinking("gemini-2.5-flash") and helpers.supports_thinking("gemini-3-pro")
    assert not helpers.supports_thinking("gemini-2.0-flash") and not helpers.supports_thinking("local/qwen-1.5b")
