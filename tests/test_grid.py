"""The report grid: its file is validated before any job runs; a job reruns when anything it read changed
(and only then), and a run killed midway ends, after a rerun, with the tables of an uninterrupted one."""

import pytest

import helpers

GOOD = """teaching_notebooks:
  - 01_build_the_archivist.ipynb
grid:
  notebook: batch_eval_run.ipynb
  fixed:
    evalset: final
  vary:
    prompt_version: [v1, v4]
report: 05_comparison_report.ipynb
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"grid.yaml is empty: list teaching_notebooks, a grid"),
        ("# only a comment\n", r"grid.yaml is empty"),
        ("grid:\n  notebook: [unclosed\n", r"grid.yaml line 3, column 1: not valid YAML"),
        (GOOD.replace("report:", "reprot:"), r"line 9: unknown key reprot \(did you mean report\?\)"),
        (GOOD.replace("  fixed:", "  fixd:"), r"line 5: unknown key grid.fixd \(did you mean grid.fixed|fixed\?\)"),
        (GOOD.replace("[v1, v4]", "v1"), r"line 8: grid.vary.prompt_version: expected a non-empty list.*write \[v1\]"),
        (GOOD.replace("  - 01_build_the_archivist.ipynb", "  01_build_the_archivist.ipynb"), r"teaching_notebooks: expected a list"),
        (GOOD.replace("01_build_the_archivist", "01_build_the_archivst"), r"line 1: teaching_notebooks\[0\]: 01_build_the_archivst.ipynb is not in notebooks/ \(did you mean 01_build_the_archivist.ipynb\?\)"),
        (GOOD.replace("05_comparison_report", "06_missing"), r"line 9: report: 06_missing.ipynb is not in notebooks/"),
        (GOOD.replace("evalset: final", "evalsett: final"), r"line 6: grid parameter evalsett: batch_eval_run.ipynb has no such parameter \(did you mean evalset\?\)"),
        (GOOD.replace("evalset: final", "api_key: abc"), r"line 6: grid parameter api_key looks like a secret"),
        ("- 01_build_the_archivist.ipynb\n", r"expected a mapping with keys teaching_notebooks, grid, report"),
    ],
)  # fmt: skip
def test_a_malformed_grid_file_is_refused_before_any_job_runs(tmp_path, monkeypatch, text, message):
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    monkeypatch.setenv("WORKBOOK_OUTPUTS", str(tmp_path / "outputs"))
    helpers.refresh_settings()
    with pytest.raises(helpers.GridFileError, match=message):
        helpers.run_grid(path)
    assert not (tmp_path / "outputs" / "notebooks").exists() or not any((tmp_path / "outputs" / "notebooks").iterdir())


def test_every_problem_is_listed_at_once(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text(GOOD.replace("report:", "reprot:").replace("[v1, v4]", "v1"))
    with pytest.raises(helpers.GridFileError, match=r"has 2 problem\(s\):\n  line 8: .*\n  line 9: "):
        helpers.grid_jobs(path)


def test_the_committed_grid_is_valid():
    assert len(helpers.grid_jobs()) == 10
