"""What the comparison report (notebook 05) reads from all runs: overview, pass rates, changes, cost."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

from workbook.agreement import bootstrap_ci


def run_overview(metas: pd.DataFrame) -> pd.DataFrame:
    """Return one row per run: what was run, with which models, when."""
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
    return metas.reindex(columns=columns).set_index("run_id")


def version_pass_rates(table: pd.DataFrame, metric: str = "final_response_match_v2") -> pd.DataFrame:
    """Return case pass rates (ADK status) per prompt version and judge, with 95% bootstrap intervals."""
    import pandas as pd

    cases = table[table["metric"] == metric].drop_duplicates(["run_id", "repeat", "case"])
    rows = []
    for (version, judge), group in cases.groupby(["prompt_version", "judge"], sort=True):
        estimate, low, high = bootstrap_ci((group["status"] == "PASSED").astype(float).to_numpy())
        rows.append(
            {
                "prompt_version": version,
                "judge": judge,
                "cases": len(group),
                "pass_rate": estimate,
                "ci_low": low,
                "ci_high": high,
            }
        )
    return pd.DataFrame(rows).round(3)


def version_changes(
    table: pd.DataFrame, before: str, after: str, metric: str = "final_response_match_v2"
) -> pd.DataFrame:
    """Return, per judge and case, the status under two prompt versions and whether the change fixed or broke it."""
    cases = table[table["metric"] == metric].drop_duplicates(["run_id", "repeat", "case"])
    wide = cases.pivot_table(index=["judge", "case"], columns="prompt_version", values="status", aggfunc="first")
    wide = wide.reindex(columns=[before, after]).dropna()
    outcome = {("FAILED", "PASSED"): "fixed", ("PASSED", "FAILED"): "broke"}
    wide["change"] = [outcome.get((old, new), "same") for old, new in zip(wide[before], wide[after], strict=True)]
    return wide.reset_index()


def cost_by_version(table: pd.DataFrame) -> pd.DataFrame:
    """Return mean agent tokens (prompt, output, thinking apart), agent latency and judge tokens per prompt version."""
    answers = table.drop_duplicates(["run_id", "repeat", "case"])
    judged = table.dropna(subset=["judge_output_tokens"])
    agent = answers.groupby("prompt_version")[
        ["agent_prompt_tokens", "agent_output_tokens", "agent_thinking_tokens", "agent_latency_s"]
    ].mean()
    judge = judged.groupby("prompt_version")[["judge_prompt_tokens", "judge_output_tokens", "judge_latency_s"]].mean()
    return agent.join(judge).round(1)
