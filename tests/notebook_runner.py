"""Run a notebook with papermill in strict replay mode and read back its outputs."""

import os
import re
from pathlib import Path

import nbformat
import papermill
from conftest import REPO

import helpers
from workbook.quiet import BatchKernelManager


def run_notebook(name: str, tmp_path: Path, **parameters) -> nbformat.NotebookNode:
    """Execute notebooks/<name> in strict replay mode (no live model call) and return the result."""
    os.environ["WORKBOOK_RECORD_MODE"] = "replay"
    os.environ["PYTHONPATH"] = str(REPO)  # the kernel imports this checkout's helpers, not the .pth one's
    output = tmp_path / name
    papermill.execute_notebook(
        str(REPO / "notebooks" / name),
        str(output),
        parameters=parameters,
        kernel_name=helpers.KERNEL_NAME,
        cwd=str(REPO / "notebooks"),
        progress_bar=False,
        kernel_manager_class=BatchKernelManager,
    )
    return nbformat.read(output, as_version=4)


def outputs_text(notebook: nbformat.NotebookNode) -> str:
    """Return every text, markdown and HTML output of a notebook, joined."""
    pieces = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            pieces.append(str(output.get("text", "")))
            for kind in ("text/plain", "text/markdown", "text/html"):
                pieces.append(str(output.get("data", {}).get(kind, "")))
    return "\n".join(pieces)


def has_image(notebook: nbformat.NotebookNode) -> bool:
    return any("image/png" in o.get("data", {}) for c in notebook.cells for o in c.get("outputs", []))


def stderr_outputs(notebook: nbformat.NotebookNode) -> list[str]:
    """Return the text of every stderr stream output (warnings, log lines, progress bars)."""
    return [o["text"] for c in notebook.cells for o in c.get("outputs", []) if o.get("name") == "stderr"]


def progress_bar_remnants(notebook: nbformat.NotebookNode) -> list[str]:
    """Return the outputs that look like a tqdm bar ("0%|   | 0/15 [00:00<?, ?case/s]")."""
    return [line for line in outputs_text(notebook).splitlines() if PROGRESS_BAR.search(line)]


PROGRESS_BAR = re.compile(r"\d+%\|.*\|\s*\d+/\d+")
