"""Record mode `plan`: a recorded call replays, a missing one is counted and answered with a marked
placeholder that is never written to a cassette (what `python -m helpers plan` runs the notebooks in).

Each call is noted in this process's `planned_calls()` and, with WORKBOOK_PLAN_LOG set, appended to
that file as a JSON line: model, kind (agent or judge kind), hit, recorded latency, and for a miss its
digest, occurrence, first prompt line and whether it depends on an earlier placeholder.
"""

from __future__ import annotations

import json
import os
import threading

from workbook.judge_formats import call_kind, placeholder_reply

PLAN_LOG_VARIABLE = "WORKBOOK_PLAN_LOG"
PLACEHOLDER = "[PLAN PLACEHOLDER: no recording for this call; `make report LIVE=1` records it]"
_planned: list[dict] = []
_lock = threading.Lock()


def planned_reply(request: dict, digest: str, occurrence: int, recorded: dict | None) -> dict:
    """Return the reply a call gets in plan mode (the recording, or a placeholder) after counting it."""
    note = {"model": request["model"], "kind": call_kind(request), "hit": recorded is not None}
    if recorded is not None:
        reply = {**recorded["reply"], "replayed": True}
        note["latency_s"] = reply.get("latency_s") or 0.0
    else:
        usage = {"prompt_tokens": 0, "output_tokens": 0, "thinking_tokens": 0}
        reply = {"text": placeholder_reply(request, PLACEHOLDER), "finish_reason": "STOP", "usage": usage}
        reply |= {"latency_s": 0.0, "replayed": False, "planned": True}
        note |= {"digest": digest, "occurrence": occurrence, "prompt_head": _first_line(request)}
        note["depends"] = depends_on_placeholder(request)
    _record(note)
    return reply


def depends_on_placeholder(request: dict) -> bool:
    """Return whether a request carries a plan placeholder (it grades or follows a missing answer)."""
    return any(PLACEHOLDER in content["text"] for content in request["contents"]) or PLACEHOLDER in request["system"]


def planned_calls() -> list[dict]:
    """Return the calls this process counted in plan mode, in order."""
    with _lock:
        return list(_planned)


def _record(note: dict) -> None:
    target = os.environ.get(PLAN_LOG_VARIABLE, "")
    with _lock:
        _planned.append(note)
        if target:
            with open(target, "a", encoding="utf-8") as log:
                log.write(json.dumps(note) + "\n")


def _first_line(request: dict) -> str:
    text = request["contents"][-1]["text"] if request["contents"] else request["system"]
    lines = text.strip().splitlines()
    return lines[0][:100] if lines else ""
