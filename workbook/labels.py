"""Human labels (notebooks 03 and 04): one append-only CSV per battery; torn writes skipped, edits refused.

Blind labels (made before seeing any judge) live in <battery>.csv; a verdict revised after seeing a judge
is an adjudication, kept beside them in <battery>.adjudications.csv (same columns), never over them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

import csv
import hashlib
import io
import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from filelock import FileLock

from workbook.inputs import note_read
from workbook.settings import LabelFileError, WorkbookError, labels_dir
from workbook.util import append_line

log = logging.getLogger(__name__)

FAILURE_KINDS = {
    "eval_overdemanding_rubric": "eval: rubric demands more than the question",
    "eval_wrong_reference": "eval: wrong or unverifiable reference fact",
    "eval_metric_misuse": "eval: metric used outside its design",
    "eval_contradictory_rules": "eval: contradictory rules",
    "agent_outdated_knowledge": "agent: outdated knowledge",
    "agent_confidence_without_basis": "agent: confidence without basis",
}
LABEL_COLUMNS = [
    "labelled_at", "labeller", "battery", "conversation", "turn", "prompt_version", "model",
    "answer_digest", "verdict", "failure_kind", "note", "row_check",
]  # fmt: skip
# What identifies an answer across labels: the same text can recur across versions.
ANSWER_KEY = ["conversation", "turn", "prompt_version", "model", "answer_digest"]
ADJUDICATIONS = ".adjudications"  # <battery>.adjudications.csv: verdicts revised after seeing a judge
ADJUDICATED_COLUMNS = {
    "verdict": "adjudicated_verdict",
    "failure_kind": "adjudicated_kind",
    "note": "adjudication_note",
}


def save_label(
    answer_row: pd.Series | dict,
    verdict: Literal["pass", "fail"],
    failure_kind: str = "",
    note: str = "",
    labeller: str = "",
    battery: str = "archivist",
    adjudication: bool = False,
) -> dict:
    """Append one label for one answer to <labels_dir()>/<battery>.csv at once; return the row written.

    Rows are only ever appended (relabelling keeps history; the latest label wins). Each row
    carries a checksum: a write torn by a crash is ignored on reading, a row edited by hand is
    refused with its file and line. A note may hold any text (newlines, quotes, commas).
    A label made after seeing a judge is an adjudication (`adjudication=True`): it goes to
    <battery>.adjudications.csv and leaves the blind label as it was.
    """
    if verdict not in ("pass", "fail"):
        raise WorkbookError(f"verdict must be 'pass' or 'fail', not {verdict!r}")
    if failure_kind and failure_kind not in FAILURE_KINDS:
        raise WorkbookError(f"failure_kind must be one of {', '.join(FAILURE_KINDS)} (or empty), not {failure_kind!r}")
    row = {
        "labelled_at": datetime.now(UTC).isoformat(timespec="microseconds"),
        "labeller": labeller or os.environ.get("USER", "someone"),
        "battery": battery,
        "conversation": answer_row["conversation"],
        "turn": int(answer_row["turn"]),
        "prompt_version": answer_row.get("prompt_version", ""),
        "model": answer_row["model"],
        "answer_digest": answer_row["answer_digest"],
        "verdict": verdict,
        "failure_kind": failure_kind if verdict == "fail" else "",
        "note": note,
    }
    row["row_check"] = _row_check(row)
    _append_csv_row(labels_dir() / f"{battery}{ADJUDICATIONS if adjudication else ''}.csv", row)
    return row


def read_labels(battery: str = "archivist", latest: bool = True) -> pd.DataFrame:
    """Return the blind labels of a battery (with latest=True, only the newest per answer), each with the
    newest adjudication of its answer beside it: adjudicated_verdict, adjudicated_kind, adjudication_note
    (blank where none). An answer with only an adjudication has a blank blind verdict."""
    import pandas as pd

    path = labels_dir() / f"{battery}.csv"
    if not path.exists():
        return _beside_adjudications(pd.DataFrame(columns=LABEL_COLUMNS), battery)
    table = pd.DataFrame(_label_rows(path), columns=LABEL_COLUMNS)
    table["turn"] = table["turn"].astype(int)
    if latest:
        table = table.drop_duplicates(ANSWER_KEY, keep="last")
    return _beside_adjudications(table.reset_index(drop=True), battery)


def _beside_adjudications(table: pd.DataFrame, battery: str) -> pd.DataFrame:
    import pandas as pd

    if battery.endswith(ADJUDICATIONS):
        return table
    adjudicated = read_labels(battery + ADJUDICATIONS).drop_duplicates(ANSWER_KEY, keep="last")
    adjudicated = adjudicated[[*ANSWER_KEY, *ADJUDICATED_COLUMNS]].rename(columns=ADJUDICATED_COLUMNS)
    if adjudicated.empty:
        return table.assign(**dict.fromkeys(ADJUDICATED_COLUMNS.values(), ""))
    merged = table.astype({"turn": int}).merge(adjudicated, on=ANSWER_KEY, how="left")
    alone = adjudicated.merge(table[ANSWER_KEY].astype({"turn": int}), on=ANSWER_KEY, how="left", indicator=True)
    alone = alone[alone.pop("_merge") == "left_only"]  # adjudicated answers with no blind label
    return pd.concat([merged, alone], ignore_index=True).fillna(
        dict.fromkeys([*LABEL_COLUMNS, *ADJUDICATED_COLUMNS.values()], "")
    )


def with_labels(answers: pd.DataFrame, battery: str = "archivist") -> pd.DataFrame:
    """Return battery answers joined with their latest blind label and any adjudication (blank where none yet)."""
    columns = ["verdict", "failure_kind", "note", "labeller", "adjudicated_verdict"]
    labels = read_labels(battery)[[*ANSWER_KEY, *columns]]
    merged = answers.merge(labels, on=ANSWER_KEY, how="left")
    return merged.fillna(dict.fromkeys(columns, ""))


def scoreboard(triage_labels: pd.DataFrame, battery_labels: pd.DataFrame) -> pd.DataFrame:
    """Return the write-up's scoreboard: how many failures of each of the six kinds this run found."""
    import pandas as pd

    kinds = pd.concat(
        [triage_labels["failure_kind"], battery_labels.loc[battery_labels["verdict"] == "fail", "failure_kind"]]
    )
    counts = kinds[kinds != ""].value_counts()
    return pd.DataFrame(
        {"kind": list(FAILURE_KINDS.values()), "found": [int(counts.get(key, 0)) for key in FAILURE_KINDS]}
    ).set_index("kind")


CHECK_LENGTH = 10  # hex digits of a row's checksum


def _row_check(row: dict) -> str:
    payload = json.dumps([str(row[column]) for column in LABEL_COLUMNS[:-1]], ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:CHECK_LENGTH]


HEADER = ",".join(LABEL_COLUMNS)


def _label_rows(path: Path) -> list[dict]:
    """The checked rows of a label file, read as one CSV document (a quoted note may span lines)."""
    note_read(path)
    with open(path, newline="", encoding="utf-8") as handle:
        records = csv.reader(handle)
        first = next(records, None)
        if first is None:
            return []  # an empty file: no labels yet
        _check_header(path, first)
        rows, line = [], 2
        for values in records:
            first, line = line, records.line_num + 1  # a record may span several physical lines
            row = _checked_row(path, first, values) if values else None
            if row is not None:
                rows.append(row)
    return rows


def _checked_row(path: Path, line: int, values: list[str]) -> dict | None:
    """A row whose checksum holds; None for a write cut short by a crash; an error for a hand edit."""
    if len(values) < len(LABEL_COLUMNS) or (len(values) == len(LABEL_COLUMNS) and len(values[-1]) < CHECK_LENGTH):
        log.warning("%s line %d is incomplete (a write cut short by a crash); ignored", path, line)
        return None
    if len(values) > len(LABEL_COLUMNS):
        raise LabelFileError(
            f"{path} line {line}: {len(values)} fields, expected {len(LABEL_COLUMNS)} ({HEADER}): the row was "
            "edited by hand (a comma in a note needs quotes). Restore it from git, or delete it and relabel the "
            "answer with save_label or the widget"
        )
    row = dict(zip(LABEL_COLUMNS, values, strict=True))
    if row["row_check"] != _row_check(row):
        raise LabelFileError(
            f"{path} line {line}: checksum mismatch (row_check {row['row_check']!r}, its fields give "
            f"{_row_check(row)!r}): the row was edited after it was saved. Labels are append-only: restore the "
            "row from git, or delete it and relabel the answer with save_label or the widget (the latest label wins)"
        )
    return row


def _check_header(path: Path, first: list[str]) -> None:
    if first == LABEL_COLUMNS:
        return
    if set(first) & set(LABEL_COLUMNS):
        missing = [column for column in LABEL_COLUMNS if column not in first]
        extra = [column for column in first if column not in LABEL_COLUMNS]
        problem = f"has the wrong header (missing: {', '.join(missing) or '-'}; unexpected: {', '.join(extra) or '-'})"
    else:
        problem = "has no header line (line 1 is not the column names)"
    raise LabelFileError(
        f"{path} {problem}; line 1 must be exactly: {HEADER}. Fix line 1 (the rows' fields must be in that "
        "order), or move the file aside and label afresh"
    )


def _append_csv_row(path: Path, row: dict) -> None:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow([row[column] for column in LABEL_COLUMNS])
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not path.exists() or path.stat().st_size == 0:
            append_line(path, HEADER + "\n")
        else:
            with open(path, newline="", encoding="utf-8") as handle:
                _check_header(path, next(csv.reader(handle)))
        append_line(path, buffer.getvalue())
