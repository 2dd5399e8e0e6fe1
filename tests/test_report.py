"""`make report` end to end in strict replay: every notebook via the grid, the HTML report, Chromium.

The grid runs once for the module into a temporary outputs folder; the notebook tests read the
executed notebooks it leaves behind.
"""

import shutil
import subprocess

import pandas as pd
import pytest
from notebook_runner import PROGRESS_BAR, has_image, outputs_text, progress_bar_remnants, stderr_outputs

import helpers


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    outputs = tmp_path_factory.mktemp("outputs")
    patch = pytest.MonkeyPatch()
    patch.setenv("WORKBOOK_OUTPUTS", str(outputs))
    patch.setenv("WORKBOOK_RECORD_MODE", "replay")
    helpers.refresh_settings()
    first = helpers.run_grid()
    html = helpers.export_report()
    second = helpers.run_grid()
    yield {"outputs": outputs, "first": first, "second": second, "html": html}
    patch.undo()


def _executed(report, name):
    import nbformat

    return nbformat.read(report["outputs"] / "notebooks" / f"{name}.ipynb", as_version=4)


def test_every_grid_job_ran_then_was_skipped(report):
    assert [r["status"] for r in report["first"]] == ["ran"] * len(report["first"])
    assert len(report["first"]) == 9  # 4 teaching notebooks, 4 grid points, the report
    assert all(r["status"].startswith("skipped") for r in report["second"])


def test_notebook_02_shows_round1_metrics_defects_and_the_silent_drop(report):
    notebook = _executed(report, "02_rubric_vs_reference")
    text = outputs_text(notebook)
    assert "Round 1: **" in text and "cases passed** with the agent's own model judging" in text
    assert "The two metrics agree on" in text
    assert "wrong reference fact" in text and "contradictory rules" in text
    assert "the tripwire rubric appears in them: **False**" in text
    assert has_image(notebook)


def test_notebook_03_reads_labels_and_promotes(report):
    text = outputs_text(_executed(report, "03_manual_battery"))
    assert "0 still need one" in text  # every recorded answer carries a committed label
    assert "now holds 2 case(s): battery_breach_unreleased, battery_dema_confirmed" in text


def test_notebook_04_panel_size_heatmap_and_scoreboard(report):
    notebook = _executed(report, "04_judge_disagreement")
    panel = pd.read_csv(report["outputs"] / "runs" / "nb04-panel-v4" / "table.csv")
    llm = panel[panel.judge != "rouge"]
    assert llm.judge.nunique() >= 3 and llm["sample"].nunique() >= 3 and llm["repeat"].nunique() >= 2
    assert panel.case.nunique() >= 15
    text = outputs_text(notebook)
    assert has_image(notebook)  # flip rates, kappa heatmap, pass rates, confusion matrices
    assert "eval: wrong or unverifiable reference fact" in text  # the scoreboard table
    assert "Fleiss' kappa" in text


def test_executed_notebooks_and_the_report_carry_no_warnings_or_stale_progress_bars(report):
    for path in sorted((report["outputs"] / "notebooks").glob("*.ipynb")):
        notebook = _executed(report, path.stem)
        assert stderr_outputs(notebook) == [], path.name
        assert progress_bar_remnants(notebook) == [], path.name
    html = report["html"].read_text()
    assert "[EXPERIMENTAL]" not in html and "UserWarning" not in html and not PROGRESS_BAR.search(html)


def test_report_html_has_its_sections_and_no_code(report):
    html = report["html"].read_text()
    for section in (
        "Prompt versions",
        "What the prompt change fixed and broke",
        "Judges",
        "Metrics",
        "Cost per prompt version",
        "Scoreboard",
    ):
        assert section in html
    assert "helpers.read_runs()" not in html  # code cells are hidden
    assert "data:image/png;base64" in html


def test_report_opens_in_headless_chromium_without_console_errors(report, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is missing: `make test` installs it with apt-get"
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
    ]  # fmt: skip
    url = report["html"].as_uri()
    shot = tmp_path / "report.png"
    done = subprocess.run(
        [chromium, *flags, f"--screenshot={shot}", "--window-size=1280,1600", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists() and shot.stat().st_size > 10_000
    console_errors = [line for line in done.stderr.splitlines() if "CONSOLE" in line and "ERROR" in line.upper()]
    assert console_errors == []
    dom = subprocess.run([chromium, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    assert "Comparison report" in dom and "Scoreboard" in dom
