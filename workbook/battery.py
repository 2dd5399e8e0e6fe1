"""The manual battery (notebook 03): hand-written conversations, run through the agent, promoted to evals."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from google.adk.agents import LlmAgent

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.genai import types

from workbook.agent import APP_NAME, chat_async
from workbook.evalfiles import EVALSETS, data_file, load_eval_config, load_evalset
from workbook.lint import lint_evalset
from workbook.runscope import replay_scope
from workbook.settings import DATA, BatteryError, WorkbookError
from workbook.util import atomic_write, progress, run_sync, text_digest, text_of

BATTERIES = DATA / "battery"


@dataclass(frozen=True)
class BatteryConversation:
    """One hand-written test: user turns in order and what a good answer does."""

    id: str
    group: str
    turns: tuple[str, ...]
    expect: str


def load_battery(source: str | Path = "archivist") -> list[BatteryConversation]:
    """Return the conversations of a battery (a name in data/battery or a YAML path), validated."""
    import yaml

    path = data_file(source, BATTERIES, ".yaml", error=BatteryError)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise BatteryError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("conversations"), list):
        raise BatteryError(f"{path}: expected a mapping with a 'conversations' list")
    conversations = [_battery_item(path, index, item) for index, item in enumerate(data["conversations"])]
    seen: set[str] = set()
    for index, conversation in enumerate(conversations):
        if conversation.id in seen:
            raise BatteryError(f"{path}: conversations[{index}] reuses id {conversation.id!r}; ids must be unique")
        seen.add(conversation.id)
    return conversations


def run_battery(
    agent: LlmAgent, battery: str | Path = "archivist", prompt_version: str = "", only: list[str] | None = None
) -> pd.DataFrame:
    """Return one row per turn of every battery conversation (one ADK session per conversation)."""
    import pandas as pd

    conversations = [c for c in load_battery(battery) if not only or c.id in only]

    async def run_all():
        tables = []
        bar = progress(total=len(conversations), desc=f"battery on {prompt_version or agent.model}")
        try:
            for conversation in conversations:
                table = await chat_async(agent, list(conversation.turns), conversation_id=conversation.id)
                tables.append(table.assign(group=conversation.group, expect=conversation.expect))
                bar.update(1)
        finally:
            bar.close()
        return pd.concat(tables, ignore_index=True)

    with replay_scope(f"battery {prompt_version or agent.model}"):
        table = run_sync(run_all())
    table["prompt_version"] = prompt_version
    table["answer_digest"] = table["answer"].map(text_digest)
    return table


def uncovered_failures(
    labelled: pd.DataFrame,
    evalsets: tuple[str, ...] = ("final",),
    similarity: float = 0.6,
    without: tuple[str, ...] = (),
) -> pd.DataFrame:
    """Return failed battery turns with the most similar eval case; `covered` is False when none is close.

    Similarity is difflib's ratio on the user text: a rough screen, not a proof of coverage. Case ids in
    `without` are left out (e.g. the cases an earlier battery promoted, to see the evalset as it was before).
    """
    cases = [
        (name, case.eval_id, text_of(invocation.user_content))
        for name in evalsets
        for case in load_evalset(name).eval_cases
        if case.eval_id not in without
        for invocation in case.conversation or []
    ]
    failed = labelled[labelled["verdict"] == "fail"].copy()

    def closest(text: str):
        scored = [
            (difflib.SequenceMatcher(None, text.lower(), user.lower()).ratio(), f"{n}:{i}") for n, i, user in cases
        ]
        return max(scored) if scored else (0.0, "")

    best = failed["user"].map(closest)
    failed["closest_case"] = best.map(lambda pair: pair[1])
    failed["similarity"] = best.map(lambda pair: round(pair[0], 2))
    failed["covered"] = failed["similarity"] >= similarity
    return failed[["conversation", "turn", "user", "failure_kind", "closest_case", "similarity", "covered"]]


def promote_to_evalset(
    answers: pd.DataFrame, conversation_id: str, reference: str, evalset: str | Path = "battery_promoted"
) -> Path:
    """Append a battery conversation to an evalset as an ADK eval case; return the evalset's path.

    `reference` is the person-written reference for the last turn; earlier turns keep the agent's
    recorded answer as their reference (they set the context). The result is validated by ADK's
    EvalSet model and the linter before it is written, atomically.
    """
    from google.adk.evaluation.eval_case import EvalCase, Invocation, SessionInput
    from google.adk.evaluation.eval_set import EvalSet

    turns = answers[answers["conversation"] == conversation_id].sort_values("turn")
    if turns.empty:
        raise WorkbookError(f"no battery answers for conversation {conversation_id!r}")
    path = data_file(evalset, EVALSETS, ".evalset.json", must_exist=False)
    eval_set_id = path.name.removesuffix(".evalset.json")
    current = (
        load_evalset(path)
        if path.exists()
        else EvalSet(eval_set_id=eval_set_id, name="Promoted from the battery", eval_cases=[])
    )
    case_id = f"battery_{conversation_id}"
    if any(case.eval_id == case_id for case in current.eval_cases):
        raise WorkbookError(f"{path} already has a case {case_id!r}; edit it there instead")
    last_turn = turns["turn"].max()
    invocations = [
        Invocation(
            invocation_id=f"{case_id}-{row.turn}",
            user_content=types.Content(role="user", parts=[types.Part(text=row.user)]),
            final_response=types.Content(
                role="model", parts=[types.Part(text=reference if row.turn == last_turn else row.answer)]
            ),
        )
        for row in turns.itertuples()
    ]
    case = EvalCase(
        eval_id=case_id, conversation=invocations, session_input=SessionInput(app_name=APP_NAME, user_id="student")
    )
    updated = EvalSet.model_validate(
        current.model_copy(update={"eval_cases": [*current.eval_cases, case]}).model_dump()
    )
    problems = [f for f in lint_evalset(updated, load_eval_config("final_reference")) if f.severity == "error"]
    if problems:
        raise WorkbookError(f"promoting {conversation_id} would add lint errors: {problems}")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, updated.model_dump_json(indent=2, exclude_none=True))
    return path


def _battery_item(path: Path, index: int, item: Any) -> BatteryConversation:
    where = f"{path}: conversations[{index}]"
    if not isinstance(item, dict):
        raise BatteryError(f"{where}: expected a mapping with id, group, turns, expect")
    where += f" (id {item.get('id', '?')!r})"
    for field, kind in (("id", str), ("group", str), ("expect", str), ("turns", list)):
        if not isinstance(item.get(field), kind) or not item.get(field):
            raise BatteryError(f"{where}: field '{field}' must be a non-empty {kind.__name__}")
    if not re.fullmatch(r"[a-z0-9_]+", item["id"]):
        raise BatteryError(f"{where}: field 'id' must be snake_case letters, digits and underscores")
    if not all(isinstance(turn, str) and turn.strip() for turn in item["turns"]):
        raise BatteryError(f"{where}: field 'turns' must be a list of non-empty strings")
    return BatteryConversation(item["id"], item["group"], tuple(item["turns"]), item["expect"].strip())
