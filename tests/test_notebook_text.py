"""Notebook prose says what to look for; results are computed text. A markdown cell that types a result
figure (a share, an "N of M", a two-decimal value) fails, unless the cell says whose figure it cites
(the write-up's, the literature's: MT-Bench, "et al.", arXiv)."""

import json
import re

import pytest
from conftest import REPO

FIGURE = re.compile(r"\b\d+\s*(%|of\s+\d+|/\s*\d+\b)|\b0\.\d{2,}\b")
CITED = re.compile(r"write-up|et al|arXiv|MT-Bench|literature|original", re.I)
CONFIDENCE = re.compile(r"\b(90|95|99)\s*%")  # the level of an interval is a setting, not a result
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def typed_figures(cells: list[dict]) -> list[str]:
    """Return 'cell N: figure' for each markdown cell that states a result figure of its own."""
    hits = []
    for number, cell in enumerate(cells):
        text = re.sub(r"`[^`]*`", "", "".join(cell["source"]))  # code spans name settings, not results
        if cell["cell_type"] != "markdown" or CITED.search(text):
            continue
        match = FIGURE.search(CONFIDENCE.sub("", text))
        if match:
            hits.append(f"cell {number}: {match.group(0)!r}")
    return hits


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.name)
def test_no_markdown_cell_states_a_result_figure(notebook):
    assert typed_figures(json.loads(notebook.read_text())["cells"]) == []


@pytest.mark.parametrize(
    "text, caught",
    [
        ("The judge passed 9 of 15 cases.", True),
        ("Its pass rate was 60% here.", True),
        ("Kappa came out at 0.42.", True),
        ("Look at 12/15 in the table.", True),
        ("Read the 95% interval before the point value.", False),
        ("Set `samples = 3` and compare.", False),
        ("In MT-Bench (Zheng et al. 2023) GPT-4 agreed with experts 85% of the time.", False),
        ("The write-up's round 1 passed 8/8.", False),
    ],
)
def test_the_check_tells_results_from_settings_and_citations(text, caught):
    assert bool(typed_figures([{"cell_type": "markdown", "source": [text]}])) is caught
