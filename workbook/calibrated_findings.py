"""Could a calibrated pass threshold show a finding that the raw judge did not? (notebook 04)

A threshold turns each frozen answer's share of "yes" samples into one verdict. Calibrating the judge moves
that threshold; it cannot change the samples. So for each finding this module finds every threshold under
which the answers' verdicts show the predicted pattern, and checks ADK's majority and a label-calibrated
threshold against it. Fisher's test on the samples (the finding's own outcome) does not depend on any
threshold: these are per-answer verdicts, one or two answers per arm, not a second test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

from workbook.findings import finding_experiment, load_findings, load_frozen_answers, sample_outcomes

MAJORITY = 0.5 + 1e-9  # ADK passes a sample vote above one half: a tie fails


def threshold_readings(calibrated: dict[tuple[str, str], float] | None = None) -> pd.DataFrame:
    """Return one row per finding: each arm's per-answer share of yes samples, whether ADK's majority shows
    the predicted pattern, the thresholds that would, and whether the calibrated threshold for the arms'
    (judge, metric) in `calibrated` does. Findings a single threshold cannot speak to say why, and are not run."""
    import pandas as pd

    answers = load_frozen_answers()
    truth = dict(zip(answers["id"], answers["correct"], strict=True))
    rows = []
    for finding_id, finding in load_findings().items():
        why_not = not_a_threshold_question(finding)
        if why_not:
            rows.append({"finding": finding_id, "not applicable": why_not})
        else:
            shares = answer_shares(finding_experiment(finding_id).table)
            rows.append({"finding": finding_id, **threshold_reading(finding, shares, truth, calibrated or {})})
    return pd.DataFrame(rows).set_index("finding")


def not_a_threshold_question(finding: dict) -> str:
    """Return why one pass threshold cannot speak to a finding ("" when it can)."""
    if finding["measure"] not in ("pass", "correct"):
        return f"its measure ({finding['measure'].replace('_', ' ')}) is not a verdict"
    first, second = finding["arms"].values()
    if (first["judge"], first["metric"]) != (second["judge"], second["metric"]):
        return "its arms use different judges or metrics, each of which would need its own threshold"
    return ""


def threshold_reading(finding: dict, shares: pd.Series, truth: dict, calibrated: dict) -> dict:
    """Return one finding's reading from its per-(arm, answer) shares of yes samples (`answer_shares`)."""
    arm = next(iter(finding["arms"].values()))
    key = (arm["judge"], arm["metric"])
    shows = _pattern(shares, finding, truth)
    reading = {
        "judge, metric": ", ".join(key),
        "answer shares": "; ".join(f"{arm_name} {case} {share:.2f}" for (arm_name, case), share in shares.items()),
        "majority shows it": shows(MAJORITY),
        "thresholds that show it": _ranges(shares, shows),
    }
    if key in calibrated:
        reading["calibrated threshold"] = calibrated[key]
        reading["calibrated shows it"] = shows(calibrated[key])
    return reading


def answer_shares(table: pd.DataFrame) -> pd.Series:
    """Return the share of yes samples per (arm, answer), unparsed samples counting as no (as in the finding's arms)."""
    return table.assign(passed=sample_outcomes(table, "pass")).groupby(["arm", "case"], sort=False)["passed"].mean()


def _pattern(shares: pd.Series, finding: dict, truth: dict):
    """Return a test of one threshold: does the predicted arm score fewer successes (passes, or verdicts that
    match the answer's truth) than the other arm, with each answer passing when its share >= threshold?"""
    predicted = finding["predicted"]

    def shows(threshold: float) -> bool:
        passed = shares >= threshold
        cases = passed.index.get_level_values("case")
        success = passed if finding["measure"] == "pass" else passed == cases.map(truth).astype(bool)
        per_arm = success.groupby(level="arm").sum()
        return bool(per_arm[predicted] < per_arm.drop(predicted).iloc[0])

    return shows


def _ranges(shares: pd.Series, shows) -> str:
    """Return the thresholds in (0, 1] under which `shows` holds, as half-open intervals. Verdicts change only
    where a threshold crosses an answer's share, so one test per interval between shares decides it."""
    edges = sorted({0.0, *shares.tolist(), 1.0})
    showing = [(low, high) for low, high in zip(edges, edges[1:], strict=False) if shows(high)]
    merged: list[list[float]] = []
    for low, high in showing:
        if merged and merged[-1][1] == low:
            merged[-1][1] = high
        else:
            merged.append([low, high])
    return ", ".join(f"({low:.2f}, {high:.2f}]" for low, high in merged) or "none"


def threshold_sentences(readings: pd.DataFrame, labels: int) -> str:
    """Return one computed line per finding of `threshold_readings` (`labels`: how many labels fitted the
    calibrated threshold)."""
    import pandas as pd

    lines = []
    for finding, row in readings.iterrows():
        if pd.notna(row.get("not applicable")):
            lines.append(f"- **{finding}**: not a question for one threshold: {row['not applicable']}.")
            continue
        if row["majority shows it"]:
            reading = "ADK's majority already shows it"
        elif row["thresholds that show it"] == "none":
            reading = "no threshold shows it: calibrating this judge cannot reproduce it from these samples"
        else:
            reading = f"ADK's majority does not; thresholds in {row['thresholds that show it']} would"
        judge, metric = row["judge, metric"].split(", ")
        if pd.isna(row.get("calibrated threshold")):
            calibrated = f"no labels score {judge}'s {metric} metric, so no threshold is calibrated for it"
        else:
            verb = "shows it" if row["calibrated shows it"] else "does not show it"
            calibrated = (
                f"the calibrated threshold ({row['calibrated threshold']:.2f}, fitted on {labels} labels) {verb}"
            )
        lines.append(f"- **{finding}** ({row['answer shares']}): {reading}; {calibrated}.")
    return "\n".join(lines)


def threshold_summary(readings: pd.DataFrame) -> str:
    """Return one computed sentence: which findings ADK's majority shows, which only another threshold
    would, and which none can."""
    applicable = readings[readings["thresholds that show it"].notna()]
    majority = applicable["majority shows it"].astype(bool)
    unreachable = applicable["thresholds that show it"].eq("none")
    groups = {
        "ADK's majority shows": applicable[majority].index,
        "only another threshold would show": applicable[~majority & ~unreachable].index,
        "no threshold shows": applicable[~majority & unreachable].index,
    }
    return "; ".join(f"{what} {', '.join(ids)}" for what, ids in groups.items() if len(ids)) + "."
