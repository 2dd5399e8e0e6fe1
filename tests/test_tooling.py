"""Notebook hygiene as tooling: committed notebooks carry no outputs, and `make` installs nbstripout as
the clone's git filter (idempotently), so they stay that way whatever an editor saves."""

import subprocess
import sys
from pathlib import Path

import nbformat
from conftest import REPO


def test_committed_notebooks_are_stripped():
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert all(cell.outputs == [] and cell.execution_count is None for cell in code), path.name
        assert [cell for cell in code if "parameters" in cell.metadata.get("tags", [])], f"{path.name}: no parameters"


def test_make_installs_nbstripout_as_the_git_filter_idempotently(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    venv = Path(sys.executable).parent.parent
    for _ in range(2):
        subprocess.run(["make", "-s", "-C", str(clone), "git-filter", f"VENV={venv}"], check=True, timeout=120)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(clone), *args], capture_output=True, text=True, check=True).stdout

    assert git("config", "filter.nbstripout.clean").strip().endswith("-m nbstripout --keep-id")
    attributes = (clone / ".git" / "info" / "attributes").read_text().splitlines()
    assert attributes.count("*.ipynb filter=nbstripout") == 1
    assert git("status", "--porcelain") == ""  # the filter agrees with what is committed
    notebook_path = clone / "notebooks" / "01_build_the_archivist.ipynb"
    notebook = nbformat.read(notebook_path, as_version=4)
    code = next(cell for cell in notebook.cells if cell.cell_type == "code")
    code.outputs, code.execution_count = [nbformat.v4.new_output("stream", name="stdout", text="left over")], 7
    nbformat.write(notebook, notebook_path)
    git("add", str(notebook_path))
    assert git("diff", "--cached", "--name-only") == ""  # the clean filter stripped what was added
