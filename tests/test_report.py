"""`make report` end to end in strict replay: every notebook via the grid, the HTML report, Chromium.

The grid runs once for the module into a temporary outputs folder; the notebook tests read the
executed notebooks it leaves behind.
"""

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, setenv
from notebook_runner import PROGRESS_BAR, has_image, outputs_text, progress_bar_remnants, stderr_outputs

import helpers

SCREENSHOTS = REPO / "outputs" / "screenshots"


@pytest.fixture(scope="module")
def report():
    # Inside the repository's outputs folder, as `make report` runs: local workers' scratch folders then lie
    # inside the repository too (a fresh-clone `make report` once failed there and nowhere else).
    outputs = Path(tempfile.mkdtemp(prefix="test-report-", dir=REPO / "outputs"))
    patch = pytest.MonkeyPatch()
    try:
        patch.setenv("WORKBOOK_OUTPUTS", str(outputs))
        patch.setenv("WORKBOOK_RECORD_MODE", "replay")
        helpers.refresh_settings()
        first = helpers.run_grid()
        html = helpers.export_report()
        second = helpers.run_grid()
        yield {"outputs": outputs, "first": first, "second": second, "html": html}
    finally:
        patch.undo()
        shutil.rmtree(outputs)


def _executed(report, name):
    import nbformat

    return nbformat.read(report["outputs"] / "notebooks" / f"{name}.ipynb", as_version=4)


def test_every_grid_job_ran_then_was_skipped(report):
    assert [r["status"] for r in report["first"]] == ["ran"] * len(report["first"])
    assert len(report["first"]) == 10  # 5 teaching notebooks, 4 grid points, the report
    assert all(r["status"].startswith("skipped") for r in report["second"])


def test_notebook_02_shows_round1_the_metrics_and_every_finding_with_a_computed_outcome(report):
    notebook = _executed(report, "02_rubric_vs_reference")
    text = outputs_text(notebook)
    assert "Round 1 here: **" in text and "cases passed** with the agent's own model judging" in text
    assert "The two metrics agree on" in text
    findings = pd.read_csv(report["outputs"] / "runs" / "nb02-findings" / "findings.csv")
    assert findings.finding.tolist() == ["F1", "F3", "F4", "F5", "F8", "F6", "F2"]
    assert set(findings.outcome) <= {"reproduced", "not reproduced by this judge"}
    for finding in findings.finding:
        assert f"**{finding} reproduced**" in text or f"**{finding} not reproduced by this judge**" in text
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
    assert "The set meets the bar of at least 40 answers with at least 30% passes" in text  # blind labels
    assert "graded the very same 30 answers: **yes**" in text and "difference in differences" in text
    assert re.search(r"\*\*verbosity (reproduced|not reproduced by this judge)\*\*", text)  # computed verdict
    assert re.search(r"P\(yes\) for \*\*(\d+) of \1\*\* labelled answers", text)  # every labelled answer scored
    assert "local/qwen-1.5b, P(yes)" in text  # its calibration rows, held-out
    reading = r"\*\*F3\*\* \(over_demanding blurryface_right [\d.]+; fitting blurryface_right [\d.]+\): (no threshold|ADK's majority)"
    assert re.search(reading, text) and "A threshold moves verdicts, not samples." in text  # calibration vs findings


def test_executed_notebooks_and_the_report_carry_no_warnings_or_stale_progress_bars(report):
    for path in sorted((report["outputs"] / "notebooks").glob("*.ipynb")):
        notebook = _executed(report, path.stem)
        assert stderr_outputs(notebook) == [], path.name
        assert progress_bar_remnants(notebook) == [], path.name
    html = report["html"].read_text()
    assert "[EXPERIMENTAL]" not in html and "UserWarning" not in html and not PROGRESS_BAR.search(html)


def test_report_html_has_its_sections_and_no_code(report):
    html = report["html"].read_text()
    sections = ["Headline", "Findings", "Versions compared", "Judges compared", "What one run can show"]
    sections += ["Runs in this report", "Prompt versions", "Run diff", "Judge panel", "Metrics"]
    sections += ["Cost per prompt version", "Scoreboard", "How to read this report"]
    positions = [html.find(f'id="{section.replace(" ", "-")}"') for section in sections]
    assert -1 not in positions and positions == sorted(positions)  # the headline first, then the sections
    assert "helpers.read_runs()" not in html  # code cells are hidden
    assert "data:image/png;base64" in html


def test_report_stands_alone(report):
    html = report["html"].read_text()
    assert "What you will learn" not in html  # the tutorial header is tagged notebook-only
    assert str(report["outputs"]) not in html and str(REPO) not in html  # no absolute paths
    assert 'data-mime-type="application/vnd.jupyter.stderr"' not in html  # no warning leaks into the report
    assert not re.search(r">\s*(nan|NaN|None)\s*<", html)  # no NaN cells
    anchors = set(re.findall(r'href="#([^"]+)"', html))
    assert len(anchors) >= 10 and all(f'id="{anchor}"' in html for anchor in anchors)  # the contents resolve
    headline = html[html.find('id="Findings"') : html.find('id="Versions-compared"')]
    assert all(f">F{number}<" in headline for number in range(1, 11))  # ten rows, written or "no row yet"
    versions = html[html.find('id="Versions-compared"') : html.find('id="Judges-compared"')]
    assert versions.count("exact McNemar p =") == 2  # one paired test per grid judge
    assert "judge sample(s)" in html and "repeat(s)" in html  # the grid's design, computed
    samples = helpers.grid_jobs()[-2].parameters["judge_samples"]  # the last grid point's
    assert f"<strong>{samples} judge sample(s)</strong> per verdict" in html
    stability = html[html.find('id="What-one-run-can-show"') : html.find('id="Runs-in-this-report"')]
    assert stability.count(f"% at its {samples};") == 2  # stability on the grid's own samples, per grid judge
    assert versions.count("of this judge's verdicts in the grid are 95% stable") == 2
    assert "Label set <strong>archivist</strong>" in html  # the scoreboard's one label set


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


# Run in the page: the page's width against the window's, where the headline table sits, and whether
# every table sits in an output that scrolls sideways.
_MEASURE = """
const heading = document.getElementById('Findings');
const tables = [...document.querySelectorAll('table')];
const headline = tables.find(t => heading.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING);
const box = headline.getBoundingClientRect();
const output = t => t.closest('.jp-OutputArea-output') || document.body;
const scrolls = t => getComputedStyle(output(t)).overflowX === 'auto';
return JSON.stringify({
  scrollWidth: document.documentElement.scrollWidth, innerWidth, innerHeight,
  headlineTop: box.top, headlineRows: headline.querySelectorAll('tbody tr').length,
  tables: tables.length, notScrolling: tables.filter(t => !scrolls(t)).length,
  outputsPastTheWindow: tables.filter(t => output(t).getBoundingClientRect().right > innerWidth).length,
});
"""


def test_report_fits_1280px_with_the_headline_on_the_first_screen(report, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    assert chromium and chromedriver, "Debian's chromium and chromium-driver are missing: `make test` installs them"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}",
    ):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
    try:
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False},
        )
        driver.get(report["html"].as_uri())
        page = json.loads(driver.execute_script(_MEASURE))
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SCREENSHOTS / "report-first-screen-1280.png"))  # for a person to look at
    finally:
        driver.quit()
    assert page["innerWidth"] == 1280
    assert page["scrollWidth"] <= 1280, page  # no horizontal overflow: wide tables scroll in their output
    assert page["tables"] >= 8 and page["notScrolling"] == 0 and page["outputsPastTheWindow"] == 0, page
    assert page["headlineRows"] == 10 and page["headlineTop"] < page["innerHeight"] - 150, page


def _run(run_id: str, evalset: str, statuses: dict[str, str]) -> None:
    rows = [
        {"run_id": run_id, "repeat": 0, "case": case, "invocation": 1, "metric": "final_response_match_v2",
         "judge": "local/qwen-1.5b", "sample": 0, "score": float(status == "PASSED"), "status": status,
         "answer": f"{case} answer in {run_id}", "prompt_version": run_id}
        for case, status in statuses.items()
    ]  # fmt: skip
    table = pd.DataFrame(rows).reindex(columns=helpers.RUN_COLUMNS)
    helpers.write_run(table, {"run_id": run_id, "evalset": evalset, "judge_models": ["local/qwen-1.5b"]})


def test_run_diff_pairs_cases_and_highlights_fixes_and_regressions(tmp_path, monkeypatch):
    setenv(monkeypatch, WORKBOOK_OUTPUTS=str(tmp_path))
    _run("base", "final", {"a": "FAILED", "b": "PASSED", "c": "PASSED", "d": "FAILED", "e": "FAILED"})
    _run("change", "final", {"a": "PASSED", "b": "FAILED", "c": "PASSED", "d": "FAILED", "e": "PASSED"})
    _run("other", "defects", {"a": "PASSED"})
    diff = helpers.run_diff("base", "change")
    changes = dict(zip(diff.cases.case, diff.cases.change, strict=True))
    assert changes == {"a": "fixed", "b": "regressed", "c": "same (passes)", "d": "same (fails)", "e": "fixed"}
    assert (diff.test["fixed"], diff.test["broke"], diff.test["cases"]) == (2, 1, 5)
    assert diff.test["p_value"] == pytest.approx(1.0) and "cannot tell the two apart" in diff.sentence
    assert list(diff.changed().case) == ["a", "b", "e"]
    html = diff.styled().to_html()
    assert "#c8e6c9" in html and "#ffcdd2" in html  # fixes green, regressions red
    with pytest.raises(helpers.WorkbookError, match="same evalset"):
        helpers.run_diff("base", "other")


def test_findings_headline_names_the_findings_with_no_row_yet():
    written = pd.DataFrame(
        [
            {"finding": "F9", "title": "One run is a sample", "varied": "repeats", "arms": "a; b",
             "outcome": "reproduced", "p_value": 0.01, "evidence": "x", "source": "nb04"},
            {"finding": "F1", "title": "Same-model judge", "varied": "judge", "arms": "a; b",
             "outcome": "not reproduced by this judge", "p_value": float("nan"), "evidence": None, "source": "nb02"},
        ]
    )  # fmt: skip
    headline = helpers.findings_headline(written)
    assert list(headline.index) == [f"F{number}" for number in range(1, 11)]  # the nine and chapter 06's F10
    assert not headline.isna().any().any()
    assert headline.loc["F9", "outcome"] == "reproduced" and headline.loc["F3", "outcome"] == "no row yet"
    sentence = helpers.missing_findings_sentence(headline)
    assert sentence.startswith("2 of 10 findings have a row; 1 of them reproduced")
    assert "F2, F3, F4, F5, F6, F8 (notebook 02_rubric_vs_reference); F7 (notebook 03_manual_battery)" in sentence
    assert sentence.endswith("F10 (notebook 06_tool_contracts).")
