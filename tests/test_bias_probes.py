"""The self-preference probe's statistics, on hand-made verdict tables (a test of the arithmetic, not of a model)."""

import itertools

import pandas as pd
import pytest

from workbook.bias_probes import judged_by_each, self_preference

A, B = "local/a", "local/b"


def verdicts(pass_share: dict[tuple[str, str], float], cases: int = 12, samples: int = 4) -> pd.DataFrame:
    """A run table: every (judge, agent) cell passes `pass_share` of its samples on every case."""
    rows = []
    for (judge, agent), share in pass_share.items():
        for case, sample in itertools.product(range(cases), range(samples)):
            passed = sample < round(share * samples)
            rows.append(
                {"judge": judge, "agent_model": agent, "case": f"c{case}", "repeat": 0, "sample": sample}
                | {"sample_score": float(passed), "score": 0.0, "threshold": 0.5}
            )
    return pd.DataFrame(rows)


def test_a_judge_that_passes_only_its_own_answers_shows_self_preference():
    table = verdicts({(A, A): 1.0, (A, B): 0.0, (B, A): 0.5, (B, B): 0.5})
    result = self_preference(table, A, B)
    assert result["cases"] == 12 and result["estimate"] == pytest.approx(1.0)
    assert result["found"] and "favours its own" in result["sentence"]
    shares = judged_by_each(table)
    assert shares.loc[(A, A), "pass_share"] == 1.0 and shares.loc[(A, B), "pass_share"] == 0.0
    assert shares.loc[(B, A), "samples"] == 48


def test_a_lenient_judge_is_not_a_self_preferring_one():
    table = verdicts({(A, A): 1.0, (A, B): 1.0, (B, A): 0.5, (B, B): 0.5})
    result = self_preference(table, A, B)
    assert result["estimate"] == pytest.approx(0.0) and not result["found"]
    assert "no self-preference" in result["sentence"]


def test_the_interval_resamples_cases_so_few_cases_leave_it_wide():
    few = verdicts({(A, A): 1.0, (A, B): 0.5, (B, A): 0.5, (B, B): 0.5}, cases=3)
    mixed = pd.concat(
        [
            few,
            verdicts({(A, A): 0.0, (A, B): 0.5, (B, A): 0.5, (B, B): 0.5}, cases=2).replace(
                {"case": {"c0": "d0", "c1": "d1"}}
            ),
        ]
    )
    result = self_preference(mixed, A, B)
    assert result["cases"] == 5 and result["ci_low"] < 0 < result["ci_high"] and not result["found"]
