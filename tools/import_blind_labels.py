"""Store blind labels written outside the workbook (CSV: item, verdict, failure_kind, note) in the label store.

    WORKBOOK_RECORD_MODE=replay .venv/bin/python tools/import_blind_labels.py final /tmp/labelling/final_v4_labels.csv
    WORKBOOK_RECORD_MODE=replay .venv/bin/python tools/import_blind_labels.py f9 /tmp/labelling/f9_labels.csv
    WORKBOOK_RECORD_MODE=replay .venv/bin/python tools/import_blind_labels.py probe /tmp/labelling/probe_r0_labels.csv
    WORKBOOK_RECORD_MODE=replay .venv/bin/python tools/import_blind_labels.py written /tmp/labelling/written_labels.csv

Items name answers of the final evalset run by the v4 archivist: on qwen-0.5b "final-<case>" (notebook 02's
run) or "f9-<case>-r<repeat>" (notebook 04's F9 agent run); "probe-<model>-<case>-r0" (notebook 04's
self-preference probe, model qwen-0.5b or qwen-1.5b); "written-<case>" names the maintainers' written answers
(data/answers/final_written.yaml; model "maintainers", prompt version "written"). The answers are replayed from the recordings and
stored as battery "final" (conversation = case, turn 1) with the digest the store computes. If the labellers'
sheet (the labels file's name without "_labels") is beside it, every labelled answer must match it.
Labels already stored for an answer are skipped, so a rerun appends nothing.
"""

import sys
from pathlib import Path

import pandas as pd

import helpers
from workbook.util import text_digest

AGENT, VERSION, BATTERY, LABELLER = "local/qwen-0.5b", "v4", "final", "maintainers (blind)"
PROBE_AGENTS = ["local/qwen-0.5b", "local/qwen-1.5b"]
F9_CASES = ["breach_sequel", "dema_depression", "who_is_blurryface", "torchbearer_who_plays"]
F9_CASES += ["after_defeating_nico", "clancy_mantle"]


def answers(source: str) -> pd.DataFrame:
    """Return item, case, model and answer of every answer a source's items can name, replayed."""
    if source == "probe":
        return pd.concat([probe_answers(model) for model in PROBE_AGENTS], ignore_index=True)
    if source == "written":
        written = helpers.written_answers("final")
        return written.assign(item="written-" + written["case"], model="maintainers", version="written")
    agent = helpers.build_archivist(VERSION, model=AGENT)
    if source == "final":
        table = helpers.run_eval(agent, "final", "final_reference", prompt_version=VERSION, run_id="labels-final")
        table["item"] = "final-" + table["case"]
    else:
        one_sample = helpers.with_judge(helpers.load_eval_config("final_reference"), num_samples=1)
        table = helpers.run_eval(
            agent, "final", one_sample, repeats=5, prompt_version=VERSION, run_id="labels-f9", case_ids=F9_CASES
        )
        table["item"] = "f9-" + table["case"] + "-r" + table["repeat"].astype(str)
    return table.drop_duplicates("item").assign(model=AGENT, version=VERSION)[
        ["item", "case", "model", "version", "answer"]
    ]


def probe_answers(model: str) -> pd.DataFrame:
    """Return the self-preference probe's answers of one agent model (as judged by qwen-0.5b, replayed)."""
    agent = helpers.build_archivist(VERSION, model=model)
    table = helpers.run_eval(
        agent, "final", "final_reference", prompt_version=VERSION, judge_model="local/qwen-0.5b", run_id="labels-probe"
    )
    table["item"] = f"probe-{model.split('/')[-1]}-" + table["case"] + "-r" + table["repeat"].astype(str)
    return table.drop_duplicates("item").assign(model=model, version=VERSION)[
        ["item", "case", "model", "version", "answer"]
    ]


def main(source: str, labels_path: str) -> None:
    labels = pd.read_csv(labels_path, dtype=str, keep_default_na=False)
    table = labels.merge(answers(source), on="item", how="left", validate="one_to_one")
    if table["answer"].isna().any():
        raise SystemExit(f"{labels_path}: no replayed answer for {table.item[table.answer.isna()].tolist()}")
    sheet = Path(labels_path.replace("_labels", ""))
    if sheet.exists() and sheet != Path(labels_path):
        shown = pd.read_csv(sheet, dtype=str).set_index("item")["answer"]
        differs = [item for item, answer in zip(table.item, table.answer, strict=True) if shown.get(item) != answer]
        if differs:
            raise SystemExit(f"{sheet}: the labellers saw other answers for {differs}: not importing")
    labels = helpers.read_labels(BATTERY)
    stored = set(zip(labels["model"], labels["conversation"], labels["answer_digest"], strict=True))
    written = 0
    for row in table.itertuples():
        answer = {"conversation": row.case, "turn": 1, "prompt_version": row.version, "model": row.model}
        answer["answer_digest"] = text_digest(row.answer)
        if (row.model, row.case, answer["answer_digest"]) in stored:
            continue
        stored.add((row.model, row.case, answer["answer_digest"]))
        helpers.save_label(answer, row.verdict, row.failure_kind, row.note, labeller=LABELLER, battery=BATTERY)
        written += 1
    print(
        f"{written} label(s) stored in {helpers.labels_dir() / (BATTERY + '.csv')}; {len(table) - written} already there"
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
