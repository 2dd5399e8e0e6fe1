"""No silent loss: what failed inside a run becomes ERROR rows, then one error (or a visible warning).

ADK's eval service catches model errors: a failed agent inference drops its case, a failed judge
call makes its metric NOT_EVALUATED. The model layer notes every failed call in the run scope
(`workbook.runscope`), judging turns the affected results into rows with status ERROR and the cause
in `rationale`, and `settle_failures` raises `IncompleteRunError` listing them, or, with
`on_error="keep"`, warns and keeps the rows for exploration. NOT_EVALUATED results a judge did reply
to (its reply could not be parsed) are the judge's own behaviour: counted, not raised.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import pandas as pd

import warnings

from workbook.settings import IncompleteRunError, settings

OnError = Literal["raise", "keep"]

RESULT_KEY = ["repeat", "case", "invocation", "metric"]


def error_rows(case: str, repeat: int, metric: str, rationale: str) -> list[dict]:
    """Return the one ERROR row standing for a result that has no rows of its own (e.g. its answer failed)."""
    return [
        {"repeat": repeat, "case": case, "invocation": 1, "metric": metric, "sample": 0, "judge": ""}
        | {"status": "ERROR", "score": None, "rationale": rationale, "replayed": None}
    ]


def mark_judge_errors(rows: list[dict], failures: list[dict], case: str, repeat: int, metric: str) -> list[dict]:
    """Return the judged rows of one case and metric with NOT_EVALUATED turned into ERROR where a call failed.

    `failures` are those noted while this case and metric were judged. A NOT_EVALUATED result no
    judge replied to at all is an error too (ADK's evaluator raised; its log has the traceback),
    and so is a failure that left no row at all.
    """
    if not rows and not failures:
        return rows
    replied = any(row.get("raw_reply") is not None for row in rows)
    not_evaluated = any(row["status"] == "NOT_EVALUATED" for row in rows)
    if rows and (not not_evaluated or (replied and not failures)):
        return rows
    failure = next((f for f in failures if f.get("model")), failures[0] if failures else None)
    cause = "ADK's evaluator raised before any judge replied (see its log)"
    if failure is not None:
        cause = f"{failure['kind']} for {failure['model']}: " if failure.get("model") else ""
        cause += failure["cause"]
    rationale = f"judge failed: {cause}"
    if not rows:
        return error_rows(case, repeat, metric, rationale)
    return [
        row | {"status": "ERROR", "score": None, "rationale": rationale} if row["status"] == "NOT_EVALUATED" else row
        for row in rows
    ]


def run_counts(table: pd.DataFrame) -> dict:
    """Return a run's meta.json counts: ERROR and NOT_EVALUATED results, unparsed judge samples."""
    if table.empty:
        return {"errors": 0, "not_evaluated": 0, "unparsed_samples": 0}
    results = table.drop_duplicates(RESULT_KEY)
    unparsed = (table["sample_verdict"] == "unparsed") & table["raw_reply"].notna()
    return {
        "errors": int((results["status"] == "ERROR").sum()),
        "not_evaluated": int((results["status"] == "NOT_EVALUATED").sum()),
        "unparsed_samples": int(unparsed.sum()),
    }


def summary_line(run_id: str, table: pd.DataFrame) -> str:
    """Return the one-line summary printed after a run: its size and what is not a verdict."""
    counts = run_counts(table)
    cases = table[["repeat", "case"]].drop_duplicates().shape[0] if not table.empty else 0
    return (
        f"run {run_id}: {cases} case result(s), {len(table)} row(s); {counts['errors']} ERROR, "
        f"{counts['not_evaluated']} NOT_EVALUATED, {counts['unparsed_samples']} unparsed judge sample(s)"
    )


def settle_failures(table: pd.DataFrame, failures: list[dict], on_error: OnError, what: str) -> None:
    """Raise IncompleteRunError listing every ERROR result of a run (case, metric, cause), or with
    on_error="keep" warn and return, leaving the ERROR rows in the table. No ERROR: return quietly.

    In replay mode the error names the command that records what is missing.
    """
    if on_error not in ("raise", "keep"):
        raise IncompleteRunError(f"on_error must be 'raise' or 'keep', not {on_error!r}")
    broken = table[table["status"] == "ERROR"].drop_duplicates(RESULT_KEY) if not table.empty else table
    if broken.empty:
        return
    lines = [
        f"  - repeat {row.repeat}, case {row.case}, metric {row.metric}: {row.rationale}" for row in broken.itertuples()
    ]
    misses = sum(1 for failure in failures if failure.get("kind") == "replay miss")
    advice = ""
    if misses or settings().workbook_record_mode == "replay":
        advice = (
            f"\n{misses} replay miss(es): record what is missing with `make report LIVE=1` "
            "(or WORKBOOK_RECORD_MODE=auto for this run), then commit data/recordings."
        )
    message = (
        f"{what}: {len(broken)} result(s) could not be computed (the model layer saw the failures that "
        "ADK's eval service swallowed):\n"
        + "\n".join(lines[:30])
        + (f"\n  ... and {len(lines) - 30} more" if len(lines) > 30 else "")
        + advice
    )
    if on_error == "raise":
        raise IncompleteRunError(message + "\nTo explore the rest of the table anyway, pass on_error='keep'.")
    warnings.warn(message + "\nKept as rows with status ERROR (on_error='keep').", stacklevel=3)
