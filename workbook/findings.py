"""The findings as controlled experiments (notebooks 02-04): frozen answers, arms that differ in one
field, each arm's share with an interval, and a computed verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from google.adk.evaluation.eval_config import EvalConfig
    from google.adk.evaluation.eval_set import EvalSet

from dataclasses import dataclass
from pathlib import Path

from workbook.agent import load_prompt
from workbook.evals import judge_answers
from workbook.inputs import note_read
from workbook.judge_stats import wilson
from workbook.panel import single_turn_case
from workbook.runs import provenance
from workbook.settings import DATA, WorkbookError, runs_dir
from workbook.util import atomic_write, now, text_digest

ANSWERS = DATA / "answers" / "frozen.yaml"
WRITTEN = DATA / "answers" / "final_written.yaml"
EXPERIMENTS = DATA / "experiments" / "findings.yaml"
METRICS = {"rubric": "rubric_based_final_response_quality_v1", "reference": "final_response_match_v2"}
ARM_FIELDS = {
    "judge",
    "instruction",
    "samples",
    "repeats",
    "metric",
    "rubric",
    "rubric_type",
    "global_rubric",
    "reference",
    "answer_form",  # plain (default) or padded: a bias probe's twin of the answer that adds no facts
}
MEASURES = {"pass", "correct", "rubric_in_prompt"}
ALPHA = 0.05
FINDINGS_COLUMNS = ["finding", "title", "varied", "arms", "outcome", "p_value", "evidence"]


class ExperimentError(WorkbookError):
    """A frozen-answer or experiment file is malformed: the message names file, place and fix."""


def load_frozen_answers(path: Path = ANSWERS) -> pd.DataFrame:
    """Return the frozen answers (id, question, answer, correct, why, digest), validated."""
    import pandas as pd

    items = _yaml(path).get("answers")
    if not isinstance(items, list) or not items:
        raise ExperimentError(f"{path}: expected a non-empty 'answers' list")
    for index, item in enumerate(items):
        missing = {"id", "question", "answer", "correct", "why"} - set(item or {})
        if missing:
            raise ExperimentError(f"{path}: answers[{index}] lacks {', '.join(sorted(missing))}; see the file's header")
    table = pd.DataFrame(items)
    if table["id"].duplicated().any():
        raise ExperimentError(f"{path}: answer ids must be unique: {sorted(table.id[table.id.duplicated()])}")
    table["digest"] = table["answer"].map(text_digest)
    return table


def written_answers(evalset: str = "final", path: Path = WRITTEN) -> pd.DataFrame:
    """Return the maintainers' written answers (case, user, answer) to an evalset's single-turn questions,
    ready for judge_answers; the questions come from the evalset itself."""
    import pandas as pd

    from workbook.evalfiles import load_evalset

    items = _yaml(path).get("answers") or []
    questions = {
        case.eval_id: case.conversation[0].user_content.parts[0].text for case in load_evalset(evalset).eval_cases
    }
    unknown = [item.get("case") for item in items if item.get("case") not in questions]
    if unknown or not items:
        raise ExperimentError(f"{path}: no answers, or cases not in evalset {evalset!r}: {unknown}")
    frame = pd.DataFrame(items)[["case", "answer"]]
    return frame.assign(user=frame["case"].map(questions))


def load_findings(
    path: Path = EXPERIMENTS, answers: pd.DataFrame | None = None, section: str = "findings"
) -> dict[str, dict]:
    """Return each finding (or, with section="probes", each bias probe) with its arms' settings resolved
    (defaults < common < arm), validated.

    Arms must differ in the fields their finding declares under `varies` and in nothing else.
    """
    data = _yaml(path)
    known = set((answers if answers is not None else load_frozen_answers()).id)
    findings = {}
    for finding_id, finding in (data.get(section) or {}).items():
        where = f"{path}: {section}.{finding_id}"
        base = {**data.get("defaults", {}), **finding.get("common", {})}
        arms = {name: {**base, **(arm or {})} for name, arm in (finding.get("arms") or {}).items()}
        _check_finding(where, finding, arms, known)
        findings[finding_id] = {**finding, "arms": arms}
    if not findings:
        raise ExperimentError(f"{path}: nothing defined under '{section}'")
    return findings


def _check_finding(where: str, finding: dict, arms: dict, known: set[str]) -> None:
    varies = set(_as_list(finding.get("varies")))
    if len(arms) != 2 or finding.get("predicted") not in arms:
        raise ExperimentError(f"{where}: needs exactly two arms and 'predicted' naming one of them")
    if finding.get("measure") not in MEASURES:
        raise ExperimentError(f"{where}.measure: expected one of {sorted(MEASURES)}")
    unknown = set().union(*(arm.keys() for arm in arms.values())) - ARM_FIELDS
    if unknown:
        raise ExperimentError(f"{where}: unknown arm field(s) {sorted(unknown)}; known: {sorted(ARM_FIELDS)}")
    first, second = arms.values()
    differing = {key for key in first.keys() | second.keys() if first.get(key) != second.get(key)}
    if not differing or not differing <= varies:
        raise ExperimentError(f"{where}: arms differ in {sorted(differing)} but 'varies' says {sorted(varies)}")
    missing = set(finding.get("answers") or []) - known
    if missing or not finding.get("answers"):
        raise ExperimentError(f"{where}.answers: unknown or empty {sorted(missing)}; ids are in {ANSWERS.name}")


def arm_evalset(finding_id: str, arm_name: str, arm: dict, answers: pd.DataFrame) -> EvalSet:
    """Return the in-memory ADK EvalSet of one arm: one case per frozen answer, with the arm's reference
    (reference metric) or per-case rubric (when the arm also has a global rubric, as in F2)."""
    from google.adk.evaluation.eval_set import EvalSet

    reference = arm.get("reference") if arm["metric"] == "reference" else None
    per_case = [_rubric("tripwire", arm["rubric"], arm.get("rubric_type"))] if arm.get("global_rubric") else None
    cases = [single_turn_case(row.id, row.question, reference, per_case) for row in answers.itertuples()]
    return EvalSet(eval_set_id=f"{finding_id}-{arm_name}", eval_cases=cases)


def arm_config(arm: dict) -> EvalConfig:
    """Return the ADK EvalConfig of one arm: its metric, judge and samples; a rubric arm's criterion rubric."""
    from google.adk.evaluation.eval_config import EvalConfig

    criterion: dict[str, Any] = {
        "threshold": 0.5,
        "judge_model_options": {"judge_model": arm["judge"], "num_samples": arm["samples"]},
    }
    if arm["metric"] == "rubric":
        rubric_id, text = (
            ("behaviour", arm["global_rubric"]) if arm.get("global_rubric") else ("criterion", arm["rubric"])
        )
        criterion["rubrics"] = [_rubric(rubric_id, text, None)]
    return EvalConfig(criteria={METRICS[arm["metric"]]: criterion})


def run_finding(finding_id: str, findings: dict | None = None, answers: pd.DataFrame | None = None) -> pd.DataFrame:
    """Return the run table of every arm of a finding (columns finding and arm added); each arm is its own run."""
    import pandas as pd

    answers = load_frozen_answers() if answers is None else answers
    finding = (findings or load_findings(answers=answers))[finding_id]
    chosen = answers[answers["id"].isin(finding["answers"])]
    tables = []
    for arm_name, arm in finding["arms"].items():
        frame = chosen.rename(columns={"id": "case", "question": "user"})
        if arm.get("answer_form") == "padded":
            frame = frame.assign(answer=padded_answers(chosen, f"{finding_id}.arms.{arm_name}"))
        if arm["metric"] == "rubric":
            frame = frame.assign(instruction=load_prompt(arm["instruction"]).instruction)
        table = judge_answers(
            frame,
            arm_evalset(finding_id, arm_name, arm, chosen),
            arm_config(arm),
            repeats=arm["repeats"],
            run_id=f"{finding_id}-{arm_name}",
        )
        tables.append(table.assign(finding=finding_id, arm=arm_name))
    return pd.concat(tables, ignore_index=True)


def padded_answers(answers: pd.DataFrame, where: str) -> pd.Series:
    """Return each answer's padded twin (the `padded` field of frozen.yaml), refusing answers that have none."""
    padded = answers.get("padded")  # None when no answer in the file has a twin
    lacking = answers["id"].tolist() if padded is None else answers["id"][padded.isna()].tolist()
    if lacking:
        raise ExperimentError(f"{ANSWERS}: {where} needs a 'padded' twin for {lacking}; add one beside 'answer'")
    return padded


def arm_results(table: pd.DataFrame, measure: str, truth: dict[str, bool] | None = None) -> pd.DataFrame:
    """Return one row per arm: answers, samples, successes, share and its 95% Wilson interval (statsmodels).

    The unit is the judge sample on a fixed answer: the question is what this judge does with these answers.
    """
    import pandas as pd

    scored = table.assign(outcome=sample_outcomes(table, measure, truth))
    rows = []
    for arm, group in scored.groupby("arm", sort=False):
        successes, total = int(group["outcome"].sum()), len(group)
        low, high = wilson(successes, total)
        rows.append(
            {
                "arm": arm,
                "answers": ", ".join(dict.fromkeys(group["case"])),
                "samples": total,
                "successes": successes,
                "share": successes / total if total else float("nan"),
                "ci_low": low,
                "ci_high": high,
                "unparsed": int(group["sample_verdict"].eq("unparsed").sum()),
            }
        )
    return pd.DataFrame(rows)


def sample_outcomes(table: pd.DataFrame, measure: str, truth: dict[str, bool] | None = None) -> pd.Series:
    """Return 1/0 per judge sample for a measure: pass, correct (verdict matches `truth` per case) or
    rubric_in_prompt (the judge prompt listed the per-case rubric)."""
    passed = table["sample_verdict"].eq("pass")
    if measure == "pass":
        return passed.astype(int)
    if measure == "correct":
        return (passed == table["case"].map(truth or {}).astype(bool)).astype(int)
    if measure == "rubric_in_prompt":
        return table["rubrics_seen"].fillna("").str.split(",").map(lambda ids: "tripwire" in ids).astype(int)
    raise ExperimentError(f"unknown measure {measure!r}: use one of {sorted(MEASURES)}")


def verdict(arms: pd.DataFrame, predicted: str) -> dict:
    """Return the computed outcome: 'reproduced' only when the predicted arm is lower and Fisher's exact
    test on the two arms' sample counts gives p < 0.05; otherwise 'not reproduced by this judge'."""
    from scipy.stats import fisher_exact

    indexed = arms.set_index("arm")
    low, other = indexed.loc[predicted], indexed.drop(index=predicted).iloc[0]
    counts = [[low.successes, low.samples - low.successes], [other.successes, other.samples - other.successes]]
    p_value = float(fisher_exact(counts)[1])
    reproduced = bool(low.share < other.share and p_value < ALPHA)
    return {"outcome": "reproduced" if reproduced else "not reproduced by this judge", "p_value": p_value}


def finding_row(finding_id: str, finding: dict, arms: pd.DataFrame, answers: pd.DataFrame) -> dict:
    """Return one findings-table row: what varied, each arm's share with its interval, the outcome, the evidence."""
    outcome = verdict(arms, finding["predicted"])
    chosen = answers[answers["id"].isin(finding["answers"])]
    return {
        "finding": finding_id,
        "title": finding["title"],
        "varied": ", ".join(_as_list(finding["varies"])),
        "arms": describe_arms(arms, finding["measure"]),
        **outcome,
        "evidence": "; ".join(f"{row.id} ({row.digest})" for row in chosen.itertuples()),
    }


def describe_arms(arms: pd.DataFrame, measure: str) -> str:
    """Return the arms as one line: name: successes/samples = share [low, high] (measure)."""
    return (
        "; ".join(
            f"{row.arm}: {row.successes}/{row.samples} = {row.share:.2f} [{row.ci_low:.2f}, {row.ci_high:.2f}]"
            for row in arms.itertuples()
        )
        + f" ({measure.replace('_', ' ')})"
    )


def write_findings(rows: list[dict], run_id: str) -> Path:
    """Write a notebook's findings table as outputs/runs/<run_id>/findings.csv (+ meta.json); return the path."""
    import json

    import pandas as pd

    folder = runs_dir() / run_id
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / "findings.csv", pd.DataFrame(rows, columns=FINDINGS_COLUMNS).to_csv(index=False))
    meta = {"run_id": run_id, "kind": "findings", **provenance(), "written": now()}
    atomic_write(folder / "meta.json", json.dumps(meta, indent=2) + "\n")
    return folder / "findings.csv"


def read_findings() -> pd.DataFrame:
    """Return every findings row written under the runs folder, in finding order (F1..F9)."""
    import pandas as pd

    note_read(runs_dir())  # a report job reruns when the findings it read changed
    paths = sorted(runs_dir().glob("*/findings.csv"))
    for path in paths:
        note_read(path)
    if not paths:
        return pd.DataFrame(columns=["source", *FINDINGS_COLUMNS])
    table = pd.concat([pd.read_csv(p).assign(source=p.parent.name) for p in paths], ignore_index=True)
    order = table["finding"].str.extract(r"(\d+)")[0].astype(int)
    return table.assign(_order=order).sort_values("_order").drop(columns="_order").reset_index(drop=True)


def _rubric(rubric_id: str, text: str, rubric_type: str | None):
    from google.adk.evaluation.eval_rubrics import Rubric, RubricContent

    return Rubric(rubric_id=rubric_id, rubric_content=RubricContent(text_property=text), type=rubric_type)


def _yaml(path: Path) -> dict:
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        note_read(path)  # frozen answers, experiments: a report job reruns when they change
    except FileNotFoundError:
        raise ExperimentError(f"{path}: file not found") from None
    except yaml.YAMLError as error:
        raise ExperimentError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise ExperimentError(f"{path}: expected a mapping at the top level")
    return data


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]


@dataclass
class FindingResult:
    """One finding's experiment: its spec, run table, per-arm results and findings-table row."""

    finding_id: str
    finding: dict
    table: pd.DataFrame
    arms: pd.DataFrame
    row: dict

    @property
    def sentence(self) -> str:
        """Return the result as one computed sentence for the notebook."""
        arms = "; ".join(
            f"{r.arm}: {r.successes} of {r.samples} samples ({r.share:.0%}, 95% CI {r.ci_low:.0%}-{r.ci_high:.0%})"
            for r in self.arms.itertuples()
        )
        return (
            f"**{self.finding_id} {self.row['outcome']}** (measure: {self.finding['measure'].replace('_', ' ')}). "
            f"{arms}. Fisher's exact p = {self.row['p_value']:.3g}; predicted lower: {self.finding['predicted']}."
        )


def finding_experiment(finding_id: str, section: str = "findings") -> FindingResult:
    """Return a finding's (or a bias probe's) experiment, run (or replayed) arm by arm, with its computed verdict."""
    answers = load_frozen_answers()
    findings = load_findings(answers=answers, section=section)
    table = run_finding(finding_id, findings, answers)
    truth = dict(zip(answers["id"], answers["correct"], strict=True))
    arms = arm_results(table, findings[finding_id]["measure"], truth)
    return FindingResult(
        finding_id, findings[finding_id], table, arms, finding_row(finding_id, findings[finding_id], arms, answers)
    )


def sample_rationales(result: FindingResult, arm: str | None = None) -> pd.DataFrame:
    """Return each judge sample of a finding (or one arm): answer, repeat, sample, verdict and rationale."""
    table = result.table if arm is None else result.table[result.table["arm"] == arm]
    return table[["arm", "case", "repeat", "sample", "sample_verdict", "rationale"]].reset_index(drop=True)


def promotion_finding(coverage: pd.DataFrame, judged: pd.DataFrame) -> dict:
    """Return F7's findings row: battery failures no eval case covered before, and how often their promoted
    cases fail the same answers now (pooled judge samples; reproduced when every promoted failure was
    uncovered and the pooled pass share is below one half by a one-sided binomial test at 5%)."""
    from scipy.stats import binomtest

    promoted = coverage[coverage["conversation"].isin(judged["case"])]
    passes, total = int(judged["sample_verdict"].eq("pass").sum()), len(judged)
    low, high = wilson(passes, total)
    p_value = float(binomtest(passes, total, 0.5, alternative="less").pvalue) if total else float("nan")
    reproduced = bool(len(promoted) and not promoted["covered"].any() and p_value < ALPHA)
    return {
        "finding": "F7",
        "title": "A hand battery finds agent errors that no eval case covers",
        "varied": "evalset: before vs after promoting the battery's failures",
        "arms": f"before: {int(promoted['covered'].sum())}/{len(promoted)} of these failures covered "
        f"(closest similarity {promoted['similarity'].max():.2f}); after: the promoted cases pass "
        f"{passes}/{total} = {passes / total:.2f} [{low:.2f}, {high:.2f}] of judge samples",
        "outcome": "reproduced" if reproduced else "not reproduced by this judge",
        "p_value": p_value,
        "evidence": "; ".join(
            f"{row.case} ({text_digest(row.answer)})" for row in judged.drop_duplicates("case").itertuples()
        ),
    }


def noise_finding_row(agent_runs: pd.DataFrame, judge_runs: pd.DataFrame) -> dict:
    """Return F9's findings row: on how many cases the verdicts vary across agent repeats (one judge sample
    each) and across judge samples on one frozen answer, each share with its Wilson interval over cases.

    "Reproduced" means at least one case varies in either arm: one run is then a sample, not the truth.
    """
    arms, varying = [], set()
    for arm, table in (("agent repeats", agent_runs), ("judge samples on one answer", judge_runs)):
        verdicts = table[table["sample_verdict"].isin(["pass", "fail"])].groupby("case")["sample_verdict"]
        varies = verdicts.nunique().gt(1)
        varying |= set(varies[varies].index)
        low, high = wilson(int(varies.sum()), len(varies))
        arms.append(
            f"{arm}: {int(varies.sum())}/{len(varies)} cases vary = {varies.mean():.2f} [{low:.2f}, {high:.2f}]"
        )
    runs = f"{agent_runs['run_id'].iloc[0]}, {judge_runs['run_id'].iloc[0]}"
    return {
        "finding": "F9",
        "title": "One run is a sample: answers and verdicts vary between runs",
        "varied": "agent repeat; judge sample",
        "arms": "; ".join(arms) + " (cases whose verdicts vary)",
        "outcome": "reproduced" if varying else "not reproduced by this judge",
        "p_value": float("nan"),
        "evidence": f"{runs}: " + (", ".join(sorted(varying)) or "no case varied"),
    }
