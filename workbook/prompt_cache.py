"""Warm prompt prefixes across processes: llama.cpp slot states on disk, keyed by model file and prefix.

Every papermill kernel, `adk eval` or test is a fresh process whose first judge call would re-read
ADK's ~2,600-token rubric preamble (~70 s on qwen-1.5b on 2 cores) and whose first agent call would
re-read the archivist's instruction. After the first call with a long shared prefix (the system
instruction, then an ADK judge's fixed preamble), the engine saves its slot (llama.cpp's KV cache
and its tokens) to the model cache folder; a later process restores that file before its first call
with the same prefix. llama.cpp then reuses the longest common token prefix, exactly as its in-memory
prompt cache does, so replies and recording keys do not change: only the prompt reading is skipped.
The folder is bounded (WORKBOOK_PROMPT_CACHE_MIB, 0 turns it off): the least recently used states go first.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from workbook.judge_formats import judge_preamble
from workbook.settings import settings

log = logging.getLogger(__name__)

# Shorter prefixes are cheaper to recompute than to restore (a state file holds the whole slot).
_MIN_PREFIX_CHARS = 2000
_SUFFIX = ".slot"


def prompt_cache_dir() -> Path:
    """Return the folder of saved prompt states: WORKBOOK_PROMPT_CACHE, else prompt-cache in the model cache."""
    current = settings()
    return current.workbook_prompt_cache or current.workbook_model_cache / "prompt-cache"


def shared_prefix(messages: list[dict]) -> str:
    """Return the start of a chat that other calls share: the system instruction, then the fixed
    preamble of an ADK judge prompt in the first user turn ('' parts where there is none)."""
    system = next((m["content"] for m in messages if m["role"] == "system" and isinstance(m["content"], str)), "")
    first = next((m["content"] for m in messages if m["role"] == "user" and isinstance(m["content"], str)), "")
    return f"{system}\n{judge_preamble(first)}"


class PromptCache:
    """The saved prompt states of one model file, restored into and saved from its llama.cpp slot 0."""

    def __init__(self, model: Path, post: Callable[[str, dict], dict]):
        stat = model.stat()
        identity = f"{model.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
        self.model_tag = f"{model.stem}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"
        self.folder = prompt_cache_dir()
        self.bound = settings().workbook_prompt_cache_mib * 2**20
        self.post = post  # POSTs JSON to the model's in-process llama.cpp server
        self.slot_key: str | None = None  # the prefix key of what slot 0 holds now (n_parallel is 1)

    def key(self, messages: list[dict]) -> str | None:
        """Return the file name under which a chat's shared prefix is saved, or None when it is too short."""
        prefix = shared_prefix(messages)
        if not self.bound or len(prefix) < _MIN_PREFIX_CHARS:
            return None
        return f"{self.model_tag}-{hashlib.sha256(prefix.encode()).hexdigest()[:24]}{_SUFFIX}"

    def before(self, key: str | None) -> bool:
        """Restore the saved state for `key` into the slot unless the slot holds it already; return
        whether a state was restored."""
        path = self.folder / key if key else None
        if key is None or key == self.slot_key or not path.exists():
            return False
        reply = self._slot_action("restore", key)
        if "error" in reply:  # evicted or being replaced by another process: recompute instead
            log.info("prompt state %s not restored: %s", key, reply["error"])
            return False
        os.utime(path)  # least recently used goes first
        self.slot_key = key
        return True

    def after(self, key: str | None) -> None:
        """Note what the slot holds after a call; save it when its prefix has no saved state yet."""
        self.slot_key = key
        if key is None or (self.folder / key).exists():
            return
        partial = f"{key}.{os.getpid()}.partial"  # renamed into place: another process never reads half a file
        reply = self._slot_action("save", partial)
        if "error" in reply:  # a full disk, say: the next process recomputes the prefix, as before
            log.info("prompt state %s not saved: %s", key, reply["error"])
            return
        (self.folder / partial).replace(self.folder / key)
        evict(self.folder, self.bound)

    def _slot_action(self, action: str, filename: str) -> dict:
        try:
            return self.post(f"/slots/0?action={action}", {"filename": filename})
        except OSError as error:  # urllib's HTTPError too: llama.cpp answers a failed action with 4xx/5xx
            return {"error": str(error)}


def evict(folder: Path, bound: int) -> list[Path]:
    """Delete the least recently used saved states until the folder holds at most `bound` bytes; return them."""
    states = []
    for path in folder.glob(f"*{_SUFFIX}"):
        try:
            stat = path.stat()
        except FileNotFoundError:  # another process evicted it meanwhile
            continue
        states.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in states)
    evicted = []
    for _, size, path in sorted(states):
        if total <= bound:
            break
        total -= size
        path.unlink(missing_ok=True)
        evicted.append(path)
    return evicted
