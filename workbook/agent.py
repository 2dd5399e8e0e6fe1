"""The lore archivist (notebook 01): prompt versions, the ADK agent, and conversations through ADK's runner."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from google.adk.agents import LlmAgent
    from pandas.io.formats.style import Styler

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from google.genai import types

import workbook.models  # noqa: F401  (registers the local/... and recorded gemini-* model classes)
from workbook.inputs import note_read
from workbook.runscope import replay_scope
from workbook.settings import DATA, WorkbookError, settings
from workbook.util import run_sync, wrapped

PROMPTS = DATA / "prompts"
APP_NAME = "lore_archivist"


@dataclass(frozen=True)
class PromptVersion:
    """One version of the archivist's instruction, split from its header comment."""

    version: str
    header: str  # why this version exists; never sent to the model
    instruction: str
    path: Path


def prompt_versions() -> list[str]:
    """Return the archivist prompt versions found in data/prompts, oldest first."""
    note_read(PROMPTS)  # the list of versions: a new one reruns the report jobs that listed them
    found = [path.stem.removeprefix("archivist_") for path in PROMPTS.glob("archivist_v*.md")]
    return sorted(found, key=lambda version: int(version[1:]))


def load_prompt(version: str) -> PromptVersion:
    """Return a prompt version: its header comment and the instruction the model receives."""
    path = PROMPTS / f"archivist_{version}.md"
    if not re.fullmatch(r"v\d+", version) or not path.is_file():
        raise WorkbookError(f"Unknown prompt version {version!r}; data/prompts has {', '.join(prompt_versions())}")
    return read_prompt(path, version)


def read_prompt(path: Path, version: str = "") -> PromptVersion:
    """Return a prompt file (a header comment, then the instruction) split into header and instruction."""
    note_read(path)
    text = path.read_text(encoding="utf-8")
    match = re.match(r"\s*<!--(.*?)-->\s*", text, flags=re.S)
    if not match:
        raise WorkbookError(f"{path}: expected a header comment <!-- ... --> saying what changed and why")
    instruction = text[match.end() :].strip()
    if re.search(r"[{}]", instruction):
        raise WorkbookError(f"{path}: remove curly braces; ADK reads {{name}} as a session-state placeholder")
    return PromptVersion(version, match.group(1).strip(), instruction, path)


def prompt_diff(old: str, new: str) -> str:
    """Return a unified line diff between the instructions of two prompt versions."""
    before, after = load_prompt(old), load_prompt(new)
    return "\n".join(
        difflib.unified_diff(
            before.instruction.splitlines(),
            after.instruction.splitlines(),
            fromfile=f"archivist_{old}",
            tofile=f"archivist_{new}",
            lineterm="",
        )
    )


def prompt_overview() -> pd.DataFrame:
    """Return one row per prompt version: why it exists, its size, and whether it has Known facts."""
    import pandas as pd

    rows = []
    for version in prompt_versions():
        prompt = load_prompt(version)
        changed = " ".join(prompt.header.splitlines()[1:])
        rows.append(
            {
                "version": version,
                "words": len(prompt.instruction.split()),
                "known_facts": "## Known facts" in prompt.instruction,
                "what changed and why": changed,
            }
        )
    return pd.DataFrame(rows).set_index("version")


def build_archivist(
    prompt_version: str = "v4",
    model: str | None = None,
    thinking_budget: int | None = None,
    temperature: float = 0.3,
    max_output_tokens: int = 320,
) -> LlmAgent:
    """Return the lore archivist: an ADK LlmAgent with no tools and the chosen instruction."""
    from google.adk.agents import LlmAgent

    prompt = load_prompt(prompt_version)
    config = types.GenerateContentConfig(temperature=temperature, max_output_tokens=max_output_tokens)
    if thinking_budget is not None:
        # include_thoughts stays off: thought text would leak into the graded answer
        config.thinking_config = types.ThinkingConfig(thinking_budget=thinking_budget)
    return LlmAgent(
        name="lore_archivist",
        model=model or settings().default_model,
        description=f"Answers questions about the Twenty One Pilots story (prompt {prompt_version})",
        instruction=prompt.instruction,
        generate_content_config=config,
    )


def chat(agent: LlmAgent, turns: list[str] | str, conversation_id: str = "chat") -> pd.DataFrame:
    """Return one row per user turn of a conversation run through ADK's runner (one session).

    Columns: conversation, turn, user, answer, prompt/output/thinking tokens, latency_s
    (the recorded latency when replayed), model, replayed.
    """
    return run_sync(chat_async(agent, [turns] if isinstance(turns, str) else list(turns), conversation_id))


async def chat_async(agent: LlmAgent, turns: list[str], conversation_id: str = "chat") -> pd.DataFrame:
    """Return the same table as `chat`, from async code (to run several conversations concurrently)."""
    import pandas as pd
    from google.adk.runners import InMemoryRunner

    runner = InMemoryRunner(agent=agent, app_name=APP_NAME)
    session = await runner.session_service.create_session(app_name=APP_NAME, user_id="student")
    rows = []
    with replay_scope(f"chat {conversation_id}"):  # a session is a run, unless a caller's run is open
        for number, text in enumerate(turns, start=1):
            message = types.Content(role="user", parts=[types.Part(text=text)])
            row = {"conversation": conversation_id, "turn": number, "user": text, "answer": ""}
            row |= {"prompt_tokens": 0, "output_tokens": 0, "thinking_tokens": 0, "latency_s": 0.0}
            async for event in runner.run_async(user_id="student", session_id=session.id, new_message=message):
                _add_event(row, event)
            rows.append(row | {"model": agent.model})
    await runner.close()
    return pd.DataFrame(rows)


def _add_event(row: dict, event) -> None:
    if event.content and event.content.parts:
        row["answer"] += "".join(part.text or "" for part in event.content.parts if not part.thought)
    usage = event.usage_metadata
    if usage:
        row["prompt_tokens"] += usage.prompt_token_count or 0
        row["output_tokens"] += usage.candidates_token_count or 0
        row["thinking_tokens"] += usage.thoughts_token_count or 0
    meta = event.custom_metadata or {}
    if "replayed" in meta:
        row["latency_s"] += meta.get("latency_s") or 0.0
        row["replayed"] = bool(meta["replayed"])


def ask_each(versions: list[str], questions: list[str], model: str | None = None) -> pd.DataFrame:
    """Return one row per (prompt version, question), each question in a fresh session.

    Calls are grouped by version so that the instruction prefix stays in llama.cpp's cache.
    """
    import pandas as pd

    async def run_all():
        tables = []
        for version in versions:
            agent = build_archivist(version, model=model)
            for number, question in enumerate(questions, start=1):
                table = await chat_async(agent, [question], conversation_id=f"q{number}")
                tables.append(table.assign(version=version))
        return pd.concat(tables, ignore_index=True)

    with replay_scope("ask_each"):
        return run_sync(run_all())


def side_by_side(table: pd.DataFrame, by: str = "version") -> Styler:
    """Return a styled table: one row per question, one answer column per prompt version."""
    return wrapped(table.pivot_table(index="user", columns=by, values="answer", aggfunc="first", sort=False))
