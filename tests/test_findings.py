"""The findings experiments: spec validation, arm results, the computed verdict, and one replayed experiment."""

import pandas as pd
import pytest
import yaml
from conftest import set_mode

import helpers
from workbook.findings import ExperimentError, load_findings, verdict


def _table(arm_verdicts: dict[str, list[str]], case: str = "a") -> pd.DataFrame:
    rows = [
        {"arm": arm, "case": case, "sample_verdict": v, "rubrics_seen": ""}
        for arm, vs in arm_verdicts.items()
        for v in vs
    ]
    return pd.DataFrame(rows)


def test_committed_spec_arms_differ_only_in_what_they_declare():
    findings = load_findings()
    assert set(findings) >= {"F1", "F2", "F3", "F4", "F5", "F6", "F8"}
    for finding in findings.values():
        first, second = finding["arms"].values()
        assert first["samples"] >= 5 and first["repeats"] >= 3
        assert {k for k in first.keys() | second.keys() if first.get(k) != second.get(k)}


def test_arms_that_differ_in_an_undeclared_field_are_refused(tmp_path):
    spec = yaml.safe_load(helpers.load_findings.__globals__["EXPERIMENTS"].read_text())
    spec["findings"]["F3"]["arms"]["fitting"]["judge"] = "local/qwen-0.5b"  # a second change sneaks in
    path = tmp_path / "findings.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ExperimentError, match=r"F3: arms differ in \['judge', 'rubric'\]"):
        load_findings(path)


def test_unknown_answer_id_names_the_file_and_finding(tmp_path):
    spec = yaml.safe_load(helpers.load_findings.__globals__["EXPERIMENTS"].read_text())
    spec["findings"]["F4"]["answers"] = ["no_such_answer"]
    path = tmp_path / "findings.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ExperimentError, match=r"findings\.F4\.answers: unknown or empty \['no_such_answer'\]"):
        load_findings(path)


def test_arm_results_give_shares_and_wilson_intervals():
    arms = helpers.arm_results(
        _table({"low": ["pass"] * 2 + ["fail"] * 13, "high": ["pass"] * 13 + ["fail"] * 2}), "pass"
    )
    low = arms.set_index("arm").loc["low"]
    assert (low.successes, low.samples) == (2, 15)
    assert low.ci_low == pytest.approx(0.0374, abs=1e-3) and low.ci_high == pytest.approx(0.3788, abs=1e-3)


def test_correct_measure_scores_verdicts_against_the_answer_truth():
    table = pd.concat([_table({"x": ["pass", "fail"]}, case="right"), _table({"x": ["pass", "pass"]}, case="wrong")])
    arms = helpers.arm_results(table, "correct", {"right": True, "wrong": False})
    assert arms.iloc[0].successes == 1  # only the pass on the right answer is correct


def test_verdict_needs_direction_and_significance():
    strong = helpers.arm_results(_table({"a": ["pass"] + ["fail"] * 14, "b": ["pass"] * 12 + ["fail"] * 3}), "pass")
    assert verdict(strong, "a")["outcome"] == "reproduced"
    assert verdict(strong, "b")["outcome"] == "not reproduced by this judge"  # wrong direction
    weak = helpers.arm_results(_table({"a": ["pass"] * 8 + ["fail"] * 7, "b": ["pass"] * 11 + ["fail"] * 4}), "pass")
    assert verdict(weak, "a")["outcome"] == "not reproduced by this judge"  # lower, but p > 0.05


def test_promotion_finding_needs_uncovered_failures_that_the_promoted_cases_fail():
    coverage = pd.DataFrame({"conversation": ["q"], "similarity": [0.3], "covered": [False]})
    judged = pd.DataFrame({"case": ["q"] * 15, "answer": ["x"] * 15, "sample_verdict": ["fail"] * 13 + ["pass"] * 2})
    assert helpers.promotion_finding(coverage, judged)["outcome"] == "reproduced"
    covered = coverage.assign(covered=True)
    assert helpers.promotion_finding(covered, judged)["outcome"] == "not reproduced by this judge"


def test_f4_replays_from_the_committed_recordings_with_the_same_answer_in_both_arms(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBOOK_OUTPUTS", str(tmp_path))
    set_mode(monkeypatch, "replay")
    result = helpers.finding_experiment("F4")
    assert set(result.table.arm) == {"wrong_reference", "corrected_reference"}
    assert result.table.groupby("arm").answer.nunique().eq(1).all()  # the frozen answer, held fixed
    assert result.table.answer.nunique() == 1
    assert result.arms.samples.tolist() == [15, 15]
    assert result.row["outcome"] in {"reproduced", "not reproduced by this judge"}
    path = helpers.write_findings([result.row], run_id="test-findings")
    assert helpers.read_findings().finding.tolist() == ["F4"] and path.exists()


def test_a_padded_arm_needs_a_padded_twin_for_every_answer(tmp_path):
    answers = helpers.load_frozen_answers().drop(columns="padded")
    spec = yaml.safe_load(helpers.load_findings.__globals__["EXPERIMENTS"].read_text())
    assert load_findings(section="probes")["verbosity"]["varies"] == "answer_form"
    with pytest.raises(ExperimentError, match=r"verbosity\.arms\.padded needs a 'padded' twin for"):
        helpers.finding_experiment.__globals__["run_finding"]("verbosity", load_findings(section="probes"), answers)
    assert "verbosity" not in load_findings() and set(spec["probes"]) == {"verbosity"}


def test_the_verbosity_probe_varies_only_the_answer_text(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBOOK_OUTPUTS", str(tmp_path))
    set_mode(monkeypatch, "replay")
    result = helpers.finding_experiment("verbosity", section="probes")
    answers = helpers.load_frozen_answers().set_index("id")
    for arm, column in (("plain", "answer"), ("padded", "padded")):
        judged = result.table[result.table.arm == arm].drop_duplicates("case").set_index("case").answer
        assert judged.to_dict() == answers.loc[judged.index, column].to_dict()
    assert result.arms.samples.tolist() == [30, 30]  # 2 answers x 5 samples x 3 repeats per arm
    assert result.row["outcome"] in {"reproduced", "not reproduced by this judge"}
