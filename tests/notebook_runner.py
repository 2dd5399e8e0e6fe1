"""Run a notebook with papermill in strict replay mode and read back its outputs."""

import os
from pathlib import Path

import nbformat
import papermill
from conftest import REPO

import helpers


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
