"""What the comparison report (notebook 05) reads from all runs: the headline (findings, versions and
judges compared), run diffs, pass rates, cost per version and per judge, and the grid's design."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from pandas.io.formats.style import Styler

from workbook.agreement import kappa_ci, sample_verdicts
from workbook.judge_stats import paired_mcnemar, samples_for_stability, stability_curve, wilson
from workbook.labels import FAILURE_KINDS
from workbook.runs import read_runs
from workbook.settings import WorkbookError

# Which notebook writes each finding's row (outputs/runs/<run>/findings.csv), in finding order.
FINDING_NOTEBOOKS = {
    "F1": "02_rubric_vs_reference",
    "F2": "02_rubric_vs_reference",
    "F3": "02_rubric_vs_reference",
    "F4": "02_rubric_vs_reference",
    "F5": "02_rubric_vs_reference",
    "F6": "02_rubric_vs_reference",
    "F7": "03_manual_battery",
    "F8": "02_rubric_vs_reference",
    "F9": "04_judge_disagreement",
    "F10": "06_tool_contracts",
}
# Titles of the findings that have no judge experiment in data/experiments/findings.yaml.
_OTHER_TITLES = {
    "F7": "A hand battery finds agent errors that no eval case covers",
    "F9": "One run is a sample",
    "F10": "A tool output that does not explain its numbers invites an unsupported sentence",
}
# The finding whose controlled experiment stands behind each failure kind of the scoreboard.
KIND_FINDINGS = {
    "eval_overdemanding_rubric": "F3",
    "eval_wrong_reference": "F4",
    "eval_metric_misuse": "F5",
    "eval_contradictory_rules": "F6",
    "agent_outdated_knowledge": "F7",
    "agent_confidence_without_basis": "F7",
}
NO_ROW = "no row yet"
_CHANGES = {(0, 1): "fixed", (1, 0): "regressed", (1, 1): "same (passes)", (0, 0): "same (fails)"}


def findings_headline(findings: pd.DataFrame) -> pd.DataFrame:
    """Return the findings F1..F10 (the write-up's nine and chapter 06's tool contract), one row each: the
    row a notebook wrote, or, for a finding with no row yet, its title, the notebook that writes it and the
    outcome 'no row yet' (never a NaN)."""
    import pandas as pd

    from workbook.findings import load_findings

    try:
        titles = {key: spec["title"] for key, spec in load_findings().items()}
    except WorkbookError:
        titles = {}
    written = findings.drop_duplicates("finding", keep="last").set_index("finding")
    rows = []
    for finding, notebook in FINDING_NOTEBOOKS.items():
        if finding in written.index:
            row = written.loc[finding]
            p_value = row.get("p_value")
            rows.append(
                {
                    "finding": finding,
                    **{key: row.get(key) for key in ["title", "varied", "arms", "outcome"]},
                    "p": "—" if pd.isna(p_value) else f"{float(p_value):.3g}",
                    "evidence": row.get("evidence"),
                    "notebook": notebook,
                }
            )
        else:
            title = titles.get(finding) or _OTHER_TITLES.get(finding, "")
            rows.append(
                {
                    "finding": finding,
                    "title": title,
                    "varied": "—",
                    "arms": "—",
                    "outcome": NO_ROW,
                    "p": "—",
                    "evidence": "—",
                    "notebook": notebook,
                }
            )
    return pd.DataFrame(rows).set_index("finding").fillna("—")


def missing_findings_sentence(headline: pd.DataFrame) -> str:
    """Return one computed sentence: how many findings have a row, and which have none yet (and who writes them)."""
    missing = headline[headline["outcome"] == NO_ROW]
    reproduced = int((headline["outcome"] == "reproduced").sum())
    have = len(headline) - len(missing)
    sentence = f"{have} of {len(headline)} findings have a row"
    sentence += f"; {reproduced} of them reproduced with this run's judges." if have else "."
    if len(missing):
        by_notebook = missing.groupby("notebook").apply(lambda part: ", ".join(part.index), include_groups=False)
        sentence += " No row yet for " + "; ".join(f"{ids} (notebook {nb})" for nb, ids in by_notebook.items()) + "."
    return sentence


@dataclass
class RunDiff:
    """Two runs of one evalset compared case by case on one metric: per-case verdicts and the paired test."""

    before: str
    after: str
    metric: str
    cases: pd.DataFrame  # case, before, after, change, before_score, after_score, before_answer, after_answer
    test: dict  # paired_mcnemar: cases, fixed, broke, p_value, differs, sentence

    @property
    def sentence(self) -> str:
        """Return the paired test as one computed sentence."""
        return self.test["sentence"]

    def changed(self) -> pd.DataFrame:
        """Return only the cases whose verdict changed (fixed or regressed)."""
        return self.cases[self.cases["change"].isin(["fixed", "regressed"])].reset_index(drop=True)

    def styled(self, only_changed: bool = False, width: int = 110) -> Styler:
        """Return the per-case table with regressions red and fixes green (answers cut to `width` characters)."""
        shown = (self.changed() if only_changed else self.cases).copy()
        for column in ["before_answer", "after_answer"]:
            shown[column] = shown[column].fillna("").str.slice(0, width)
        colours = {"fixed": "background-color: #c8e6c9", "regressed": "background-color: #ffcdd2"}
        return (
            shown.style.hide(axis="index")
            .apply(lambda row: [colours.get(row["change"], "")] * len(row), axis=1)
            .format(precision=2, na_rep="—")
        )

    def _repr_html_(self) -> str:
        return f"<p>{self.sentence}</p>" + self.styled().to_html()


def run_diff(before: str, after: str, metric: str | None = None, labels: tuple[str, str] | None = None) -> RunDiff:
    """Return two runs of the same evalset compared case by case: fixes, regressions and an exact McNemar test.

    `before` and `after` are run ids under outputs/runs/; `labels` name them in the sentence (default: the
    ids). A case passes a run when ADK's status was PASSED in more than half of its repeats (a tie fails,
    as in ADK).
    """
    runs = {name: read_runs(name) for name in (before, after)}
    _check_same_evalset(before, after, runs[before][1].iloc[0], runs[after][1].iloc[0])
    metric = metric or _common_metric(before, after, runs[before][0], runs[after][0])
    verdicts = {name: _case_verdicts(table, metric) for name, (table, _) in runs.items()}
    cases = verdicts[before].merge(verdicts[after], left_index=True, right_index=True, suffixes=("_before", "_after"))
    if cases.empty:
        raise WorkbookError(f"runs {before!r} and {after!r} share no judged case on {metric}: nothing to compare")
    table = cases.reset_index().rename(
        columns={
            "status_before": "before",
            "status_after": "after",
            "score_before": "before_score",
            "score_after": "after_score",
            "answer_before": "before_answer",
            "answer_after": "after_answer",
        }
    )
    table["change"] = [_CHANGES[pair] for pair in zip(cases.passed_before, cases.passed_after, strict=True)]
    order = ["case", "change", "before", "after", "before_score", "after_score", "before_answer", "after_answer"]
    table = table[order]
    test = paired_mcnemar(cases.passed_before, cases.passed_after, labels=labels or (before, after))
    return RunDiff(before, after, metric, table, test)


def _check_same_evalset(before: str, after: str, first: pd.Series, second: pd.Series) -> None:
    for field in ["evalset", "evalset_sha256"]:
        if field in first and field in second and first[field] != second[field]:
            raise WorkbookError(
                f"runs {before!r} and {after!r} differ in {field} ({first[field]} vs {second[field]}): "
                "a run diff compares two runs of the same evalset; rerun one of them on the other's evalset"
            )


def _common_metric(before: str, after: str, first: pd.DataFrame, second: pd.DataFrame) -> str:
    common = sorted(set(first["metric"].dropna()) & set(second["metric"].dropna()))
    if len(common) != 1:
        raise WorkbookError(
            f"runs {before!r} and {after!r} share the metrics {common or 'none'}: pass metric= naming one of them"
        )
    return common[0]


def _case_verdicts(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    rows = table[table["metric"] == metric].drop_duplicates(["repeat", "case"])
    rows = rows.assign(passed_share=(rows["status"] == "PASSED").astype(float))
    grouped = rows.groupby("case", sort=False).agg(
        passed_share=("passed_share", "mean"), score=("score", "mean"), answer=("answer", "first")
    )
    grouped["passed"] = (grouped.pop("passed_share") > 0.5).astype(int)
    grouped["status"] = grouped["passed"].map({1: "PASSED", 0: "FAILED"})
    return grouped[["status", "passed", "score", "answer"]]


def grid_runs(metas: pd.DataFrame, prefix: str = "grid__") -> pd.DataFrame:
    """Return the report grid's runs: run id, prompt version and judge (one judge per grid run)."""
    grid = metas[metas["run_id"].str.startswith(prefix)].copy()
    grid["judge"] = grid["judge_models"].map(lambda judges: ", ".join(judges) if isinstance(judges, list) else judges)
    return grid[["run_id", "prompt_version", "judge"]].sort_values(["judge", "prompt_version"]).reset_index(drop=True)


def versions_compared(runs: pd.DataFrame, before: str, after: str) -> tuple[pd.DataFrame, dict[str, RunDiff]]:
    """Return, per judge, the paired test of prompt version `after` against `before` on the same cases
    (passed, fixed, regressed, exact McNemar p), and each judge's RunDiff (its `sentence` reads the test)."""
    import pandas as pd

    rows, diffs = [], {}
    for judge, part in runs.groupby("judge", sort=True):
        ids = part.set_index("prompt_version")["run_id"]
        if before not in ids or after not in ids:
            continue
        diff = diffs[judge] = run_diff(ids[before], ids[after], labels=(before, after))
        test = diff.test
        rows.append(
            {
                "judge": judge,
                "cases": test["cases"],
                f"passed {before}": int((diff.cases["before"] == "PASSED").sum()),
                f"passed {after}": int((diff.cases["after"] == "PASSED").sum()),
                "fixed": test["fixed"],
                "regressed": test["broke"],
                "McNemar p": round(test["p_value"], 3),
            }
        )
    return pd.DataFrame(rows), diffs


def judges_compared(table: pd.DataFrame, metric: str = "final_response_match_v2") -> pd.DataFrame:
    """Return, per prompt version and pair of judges on the same answers: agreement, Cohen's kappa with a
    95% interval, and the exact McNemar test of one judge's verdicts against the other's."""
    import itertools

    import pandas as pd

    rows = []
    for version, part in table[table["metric"] == metric].groupby("prompt_version", sort=True):
        cases = part.drop_duplicates(["judge", "repeat", "case"]).assign(passed=lambda t: t.status.eq("PASSED"))
        wide = cases.pivot_table(index="case", columns="judge", values="passed", aggfunc="mean")
        for first, second in itertools.combinations(sorted(wide.columns), 2):
            both = wide[[first, second]].dropna().gt(0.5).astype(int)  # majority over repeats; a tie fails
            kappa, low, high = kappa_ci(both[first], both[second])
            test = paired_mcnemar(both[first], both[second], labels=(first, second))
            rows.append(
                {
                    "prompt_version": version,
                    "judges": f"{first} vs {second}",
                    "cases": len(both),
                    "agree": int((both[first] == both[second]).sum()),
                    "kappa": round(kappa, 2),
                    "kappa 95% CI": f"[{low:.2f}, {high:.2f}]",
                    f"only {second} passes": test["fixed"],
                    f"only {first} passes": test["broke"],
                    "McNemar p": round(test["p_value"], 3),
                }
            )
    return pd.DataFrame(rows)


def cost_by_judge(table: pd.DataFrame) -> pd.DataFrame:
    """Return per judge model (never averaged across models): judge calls, prompt and output tokens, and
    the recorded seconds in all and per call."""
    calls = table.dropna(subset=["judge_prompt_tokens"])
    grouped = calls.groupby("judge").agg(
        calls=("judge_prompt_tokens", "size"),
        prompt_tokens=("judge_prompt_tokens", "sum"),
        output_tokens=("judge_output_tokens", "sum"),
        seconds=("judge_latency_s", "sum"),
        seconds_per_call=("judge_latency_s", "mean"),
    )
    return grouped.astype({"prompt_tokens": int, "output_tokens": int}).round(1)


def sample_design(table: pd.DataFrame) -> pd.DataFrame:
    """Return per metric what a set of runs measured: runs, cases, repeats per case and judge samples per verdict."""
    per_verdict = table.groupby(["run_id", "metric", "repeat", "case", "invocation"])["sample"].nunique()
    per_case = table.groupby(["run_id", "metric", "case"])["repeat"].nunique()
    return (
        table.groupby("metric")
        .agg(runs=("run_id", "nunique"), cases=("case", "nunique"))
        .join(per_verdict.groupby("metric").max().rename("samples"))
        .join(per_case.groupby("metric").max().rename("repeats"))
    )


def judge_stability(table: pd.DataFrame, answer: tuple[str, ...] = ("case",)) -> pd.DataFrame:
    """Return one row per LLM judge (judge as a column): the samples a majority vote needs to be 95% stable
    within the samples recorded per answer (judge_stats.samples_for_stability), and how stable ADK's
    default of 5 samples is. `answer` names the columns that tell answers apart: a panel's repeats re-judge
    one frozen answer per case; a grid's answers differ by prompt version and invocation too."""
    extra = tuple(column for column in answer if column != "case")  # sample_verdicts keeps case itself
    samples = sample_verdicts(table[table["judge"] != "rouge"], keep=extra)
    samples["case"] = samples[list(answer)].astype(str).agg("/".join, axis=1)
    return samples_for_stability(stability_curve(samples)).reset_index()


def version_pass_rates(table: pd.DataFrame, metric: str = "final_response_match_v2") -> pd.DataFrame:
    """Return cases passed (ADK status, majority over repeats) per prompt version and judge, with 95%
    Wilson intervals: the unit is the case, the cases are independent."""
    import pandas as pd

    rows = []
    for (version, judge), group in table[table["metric"] == metric].groupby(["prompt_version", "judge"], sort=True):
        verdicts = _case_verdicts(group, metric)["passed"]
        low, high = wilson(int(verdicts.sum()), len(verdicts))
        rows.append(
            {
                "prompt_version": version,
                "judge": judge,
                "cases": len(verdicts),
                "passed": int(verdicts.sum()),
                "pass_rate": verdicts.mean(),
                "ci_low": low,
                "ci_high": high,
            }
        )
    return pd.DataFrame(rows).round(3)


def run_overview(metas: pd.DataFrame) -> pd.DataFrame:
    """Return one row per run table (findings-only folders left out): what was run, with which models, when."""
    columns = [
        "run_id",
        "prompt_version",
        "agent_model",
        "judge_models",
        "evalset",
        "repeats",
        "record_mode",
        "started",
    ]
    overview = metas.reindex(columns=columns).set_index("run_id")
    overview["judge_models"] = overview["judge_models"].map(lambda j: ", ".join(j) if isinstance(j, list) else j)
    return overview.fillna("—")


def cost_by_version(table: pd.DataFrame) -> pd.DataFrame:
    """Return the agent's mean tokens per answer (prompt, output, thinking apart) and recorded latency per
    prompt version; judge cost is per judge model (cost_by_judge), never averaged here."""
    answers = table.drop_duplicates(["run_id", "repeat", "case"])
    columns = ["agent_prompt_tokens", "agent_output_tokens", "agent_thinking_tokens", "agent_latency_s"]
    return answers.groupby("prompt_version")[columns].mean().fillna(0).round(1)


def scoreboard_from(labels: pd.DataFrame, headline: pd.DataFrame) -> pd.DataFrame:
    """Return the six failure kinds counted in ONE label set (failed answers, latest label each), beside the
    finding whose controlled experiment stands behind each kind and that finding's computed outcome."""
    import pandas as pd

    failed = labels.loc[labels["verdict"] == "fail", "failure_kind"]
    counts = failed[failed != ""].value_counts()
    return pd.DataFrame(
        {
            "kind": list(FAILURE_KINDS.values()),
            "failed answers with this kind": [int(counts.get(key, 0)) for key in FAILURE_KINDS],
            "finding": [KIND_FINDINGS[key] for key in FAILURE_KINDS],
            "finding outcome": [headline.loc[KIND_FINDINGS[key], "outcome"] for key in FAILURE_KINDS],
        }
    ).set_index("kind")
