"""The bounded rubric judge format (v2) against the committed v1 replies, on the same judge requests.

The agent's recorded answers to an evalset are judged twice by the same rubric config: format v1
replays the committed recordings (strict), format v2 calls the judge live. Prints, for the rubric
verdicts of both: how many replies ADK's own parser accepted, how many verdicts agree, and the
judge's output tokens bounded vs free.

Usage: .venv/bin/python benchmarks/judge_format_agreement.py [cases] [evalset] [config] [prompt version]
(default: all cases of final with final_behaviour and v4, the 5-rubric judge of notebook 02: 15 live
qwen-1.5b calls; `cases` is a comma-separated list of case ids or `all`).
Needs the model weights (`make models`). The live calls are recorded into a scratch copy of
data/recordings, never into data/recordings itself. AGREEMENT_SCRATCH=<that scratch folder> reads an
earlier, perhaps interrupted, run instead: v2 then only replays what it recorded (plan mode), and the
cases it never reached are left out of the comparison.
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

import helpers

RESUMED = "AGREEMENT_SCRATCH" in os.environ
SCRATCH = Path(os.environ.get("AGREEMENT_SCRATCH") or tempfile.mkdtemp(prefix="judge-format-agreement-"))
if not RESUMED:
    shutil.copytree(helpers.settings().workbook_recordings, SCRATCH / "recordings")
# use_record_mode (in judged) re-reads the settings, so these scratch folders apply.
os.environ |= {"WORKBOOK_RECORDINGS": str(SCRATCH / "recordings"), "WORKBOOK_OUTPUTS": str(SCRATCH / "outputs")}

DEFAULTS = ["all", "final", "final_behaviour", "v4"]
CASES, EVALSET, CONFIG, PROMPT = sys.argv[1:5] + DEFAULTS[len(sys.argv[1:5]) :]
AGENT, JUDGE, METRIC = "local/qwen-0.5b", "local/qwen-1.5b", "rubric_based_final_response_quality_v1"


def judged(judge_format: str) -> pd.DataFrame:
    """Return the rubric rows of one run of the evalset, v1 replayed, v2 live where not yet recorded
    (resumed: only the v2 calls recorded, as plan mode answers the others with placeholders)."""
    helpers.use_record_mode("replay" if judge_format == "v1" else "plan" if RESUMED else "auto")
    helpers.use_judge_format(judge_format)
    table = helpers.run_eval(
        helpers.build_archivist(PROMPT, model=AGENT),
        EVALSET,
        [CONFIG],
        prompt_version=PROMPT,
        judge_model=JUDGE,
        case_ids=None if CASES == "all" else CASES.split(","),
        run_id=f"agreement-{judge_format}",
        show_findings=False,
        on_error="keep",
    )
    rows = table[table["metric"] == METRIC]
    rows = rows[rows["replayed"].fillna(False).astype(bool)] if RESUMED else rows
    return rows.set_index(["repeat", "case", "invocation", "sample"])


def verdict_pairs(free: pd.DataFrame, bounded: pd.DataFrame) -> list[tuple[str, str]]:
    """Return (v1 verdict, v2 verdict) per rubric of every sample both formats judged and ADK parsed."""
    pairs = []
    for key, row in free.iterrows():
        if key in bounded.index and isinstance(row["rubric_verdicts"], str):
            other = bounded.loc[key, "rubric_verdicts"]
            if isinstance(other, str) and len(other.split(",")) == len(row["rubric_verdicts"].split(",")):
                pairs += zip(row["rubric_verdicts"].split(","), other.split(","), strict=True)
    return pairs


def main() -> None:
    free, bounded = judged("v1"), judged("v2")
    bounds = helpers.settings().workbook_judge_evidence_chars, helpers.settings().workbook_judge_rationale_chars
    print(
        f"{EVALSET}/{CONFIG} ({PROMPT}, cases: {CASES}), judge {JUDGE}; v2 bounds: Evidence {bounds[0]}, Rationale {bounds[1]} chars"
    )
    for name, rows in (("v1 free", free), ("v2 bounded", bounded)):
        parsed = rows["sample_score"].notna().sum()
        print(f"  {name:<11} ADK's parser accepted {parsed} of {len(rows)} replies")
    pairs = verdict_pairs(free, bounded)
    agree = sum(a == b for a, b in pairs)
    print(f"  rubric verdicts agreeing: {agree} of {len(pairs)} ({agree / max(len(pairs), 1):.0%})")
    flips = pd.Series([f"{a}->{b}" for a, b in pairs if a != b]).value_counts().to_dict()
    print(f"  changes v1 -> v2: {flips or 'none'}")
    tokens = bounded["judge_output_tokens"].sum(), free.loc[bounded.index, "judge_output_tokens"].sum()
    print(f"  judge output tokens: bounded {tokens[0]} vs free {tokens[1]}: ratio {tokens[0] / tokens[1]:.2f}")
    print(f"  live v2 calls recorded in {SCRATCH / 'recordings'}")


if __name__ == "__main__":
    main()
