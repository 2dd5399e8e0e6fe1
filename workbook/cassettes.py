"""Record/replay of model calls: the request key, the JSONL cassette store, and the call log of a run."""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import os
import re
import threading
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock
from google.adk.models.llm_request import LlmRequest
from google.genai import types
from pydantic import SecretStr

from workbook.inputs import note_recording
from workbook.planning import planned_reply
from workbook.runscope import ScopeLogHandler, current_scope
from workbook.settings import RecordMode, ReplayMissError, settings
from workbook.util import append_line, first_line, now, text_of

log = logging.getLogger(__name__)


def normalize_request(model: str, llm_request: LlmRequest) -> dict:
    """Return the parts of an ADK request that decide the answer, as plain JSON-able data.

    This is what a recording is keyed by: model, system instruction, contents and the
    generation settings. Seeds are left out on purpose: repeated identical requests are
    told apart by their order of occurrence, and each gets its own seed.
    """
    config = llm_request.config or types.GenerateContentConfig()
    schema = config.response_json_schema or (
        config.response_schema.model_dump(mode="json", exclude_none=True)
        if isinstance(config.response_schema, types.Schema)
        else config.response_schema
    )
    generation = {
        "temperature": config.temperature,
        "top_p": config.top_p,
        "top_k": config.top_k,
        "max_output_tokens": config.max_output_tokens,
        "stop_sequences": config.stop_sequences,
        "response_mime_type": config.response_mime_type,
        "response_schema": schema,
        "thinking_budget": config.thinking_config.thinking_budget if config.thinking_config else None,
        "response_logprobs": config.response_logprobs,
        "logprobs": config.logprobs,
    }
    contents = [_normalize_content(content) for content in llm_request.contents]
    ids = _call_ids(contents)
    request = {
        "model": model,
        "system": text_of(config.system_instruction),
        "contents": [{**turn, "text": _ADK_CALL_ID.sub(lambda m: ids[m.group(0)], turn["text"])} for turn in contents],
        "config": {key: value for key, value in generation.items() if value is not None},
    }
    tools = [_normalize_declaration(d) for tool in config.tools or [] for d in tool.function_declarations or []]
    return request | ({"tools": tools} if tools else {})  # a tool-less request keys exactly as before tools


# ADK draws a fresh id for every function call ("adk-<uuid4>"), and hallucinations_v1 copies the calls,
# ids included, into its judge prompt: numbered in order of appearance, the prompt keys the same every run.
_ADK_CALL_ID = re.compile(r"adk-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _call_ids(contents: list[dict]) -> dict[str, str]:
    found = dict.fromkeys(m.group(0) for turn in contents for m in _ADK_CALL_ID.finditer(turn["text"]))
    return {call_id: f"adk-call-{number}" for number, call_id in enumerate(found, start=1)}


def _normalize_content(content: types.Content) -> dict:
    # Tool calls and results join the key only when present, so every text-only request (and its
    # recording) keeps its digest. Call ids are left out: ADK makes them up anew in every run.
    parts = content.parts or []
    calls = [{"name": p.function_call.name, "args": p.function_call.args or {}} for p in parts if p.function_call]
    responses = [
        {"name": p.function_response.name, "response": p.function_response.model_dump(mode="json")["response"]}
        for p in parts
        if p.function_response
    ]
    normalized = {"role": content.role or "user", "text": text_of(content)}
    return normalized | ({"tool_calls": calls} if calls else {}) | ({"tool_responses": responses} if responses else {})


def _normalize_declaration(declaration: types.FunctionDeclaration) -> dict:
    parameters = declaration.parameters_json_schema or (
        declaration.parameters.model_dump(mode="json", exclude_none=True) if declaration.parameters else None
    )
    return {"name": declaration.name, "description": declaration.description or "", "parameters": parameters}


def request_digest(request: dict) -> str:
    """Return the recording key of a normalized request."""
    canonical = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


class CallLog:
    """The model calls made while this log was open, recorded or live, in order, with their tags.

    Judges' raw replies are recovered from here because ADK keeps only the winning sample's rationale.
    """

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __len__(self) -> int:
        return len(self.calls)

    def __getitem__(self, index):
        return self.calls[index]

    def __iter__(self) -> Iterator[dict]:
        return iter(self.calls)


_open_logs: contextvars.ContextVar[tuple[CallLog, ...]] = contextvars.ContextVar("open_call_logs", default=())
_call_tags: contextvars.ContextVar[dict | None] = contextvars.ContextVar("call_tags", default=None)


@contextmanager
def call_log() -> Iterator[CallLog]:
    """Yield a CallLog that collects every model call made inside the `with` block.

    Logs nest: a call is added to every log open around it. Tasks and run_sync workers started
    inside the block see it too. Outside any log, calls are recorded in cassettes only.
    """
    opened = CallLog()
    token = _open_logs.set((*_open_logs.get(), opened))
    try:
        yield opened
    finally:
        _open_logs.reset(token)


def tag_calls(**tags) -> None:
    """Tag the model calls the current task makes from now on (phase, case, repeat) in the call log."""
    _call_tags.set(tags)


# Exceptions ADK's eval service logs and swallows are kept in the open run scope, with the call tags.
logging.getLogger("google_adk").addHandler(ScopeLogHandler(_call_tags))


class CassetteStore:
    """Record/replay of model calls in JSONL cassettes, one file per model.

    Modes: `auto` replays a recorded call and records a missing one, `replay` fails on a
    miss, `live` always calls and appends. The n-th identical request of a run (see
    `workbook.runscope`; outside any run, of the process) replays the n-th recording of that
    request, so judge samples and repeats keep their variance and a re-run reproduces them.
    A failed call is noted in the open run scope before it raises. Recordings are keyed and noted by
    their file in `directory` even when they are written to `record_into`.
    """

    def __init__(self, directory: Path, mode: RecordMode, record_into: Path | None = None):
        self.directory = Path(directory)
        self.mode = mode
        # A scratch folder read over `directory` that takes every new recording (a Dask worker's: the
        # client merges them with `merge_recordings`); None records into `directory` itself.
        self.record_into = Path(record_into) if record_into else None
        self._seen: dict[str, int] = defaultdict(int)
        self._index: dict[Path, tuple[int, dict[tuple[str, int], dict]]] = {}
        self._lock = threading.Lock()

    async def call(self, request: dict, live_call: Callable[[int], Awaitable[dict]]) -> dict:
        """Return the reply to `request`: replayed if recorded (per mode), else live and appended."""
        digest = request_digest(request)
        scope = current_scope()
        occurrence = scope.next_occurrence(digest) if scope else self._next_occurrence(digest)
        try:
            reply = await self._reply(request, digest, occurrence, live_call)
        except Exception as error:
            if scope is not None:
                kind = "replay miss" if isinstance(error, ReplayMissError) else "model error"
                failure = {"model": request["model"], "kind": kind, "cause": first_line(error)}
                scope.note_failure({**(_call_tags.get() or {}), **failure})
            raise
        reply = {**reply, "digest": digest, "occurrence": occurrence}
        entry = {**(_call_tags.get() or {}), "model": request["model"], "request": request, **reply}
        for opened in _open_logs.get():
            opened.calls.append(entry)
        return reply

    async def _reply(
        self, request: dict, digest: str, occurrence: int, live_call: Callable[[int], Awaitable[dict]]
    ) -> dict:
        cassette = self.cassette_path(request["model"])
        recorded = None if self.mode == "live" else self._entries(cassette).get((digest, occurrence))
        if self.mode == "plan":  # `python -m helpers plan`: count it, never call a model, never write
            return planned_reply(request, digest, occurrence, recorded)
        if recorded is not None:
            note_recording(cassette, digest, occurrence)  # a report job reruns when a recording it used changes
            return {**recorded["reply"], "replayed": True}
        if self.mode == "replay":
            raise ReplayMissError(_miss_message(request, digest, occurrence, cassette))
        seed = _seed_for(digest, occurrence)
        reply = {**await live_call(seed), "seed": seed, "replayed": False}
        self._append(cassette, request, digest, occurrence, reply)
        note_recording(cassette, digest, occurrence)
        return reply

    def _next_occurrence(self, digest: str) -> int:
        with self._lock:
            occurrence = self._seen[digest]
            self._seen[digest] += 1
        return occurrence

    def cassette_path(self, model: str) -> Path:
        """Return the JSONL file that holds a model's recordings."""
        return self.directory / (re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("_") + ".jsonl")

    def reset_occurrences(self) -> None:
        """Count repeated requests made outside any run scope from zero again, as a fresh process would."""
        with self._lock:
            self._seen.clear()

    def _entries(self, cassette: Path) -> dict[tuple[str, int], dict]:
        if self.record_into is None:
            return self._file_entries(cassette)
        return {**self._file_entries(cassette), **self._file_entries(self.record_into / cassette.name)}

    def _file_entries(self, cassette: Path) -> dict[tuple[str, int], dict]:
        size = cassette.stat().st_size if cassette.exists() else 0
        cached = self._index.get(cassette)
        if cached is None or cached[0] != size:
            cached = (size, _read_cassette(cassette))
            self._index[cassette] = cached
        return cached[1]

    def _append(self, cassette: Path, request: dict, digest: str, occurrence: int, reply: dict) -> None:
        entry = {
            "digest": digest,
            "occurrence": occurrence,
            "model": request["model"],
            "recorded_at": now(),
            "prompt_head": _prompt_head(request),
            "reply": {key: value for key, value in reply.items() if key != "replayed"},
        }
        line = _redact_secrets(json.dumps(entry, ensure_ascii=False)) + "\n"
        target = self.record_into / cassette.name if self.record_into else cassette
        target.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(target) + ".lock"):
            if (digest, occurrence) in self._entries(cassette) and self.mode != "live":
                return  # another process recorded it first
            append_line(target, line)


_STORES: dict[tuple[str, str, str], CassetteStore] = {}


def cassettes() -> CassetteStore:
    """Return the process-wide cassette store for the current mode and directory."""
    current = settings()
    key = (str(current.workbook_recordings), current.workbook_record_mode, str(current.workbook_record_into))
    if key not in _STORES:
        _STORES[key] = CassetteStore(*key[:2], record_into=current.workbook_record_into)
    return _STORES[key]


def reset_occurrences() -> None:
    """Start counting repeated requests made outside any run scope from zero again in every store."""
    for store in _STORES.values():
        store.reset_occurrences()


def merge_recordings(recorded: dict[str, str]) -> list[tuple[str, str, int]]:
    """Return the recordings (cassette file, digest, occurrence) the shared cassettes already hold with
    another reply, after appending the rest of `recorded` (file name -> JSONL text: a Dask worker's
    scratch cassettes) to the shared cassettes.

    A recording already there with the same reply is dropped. One whose key is there with another reply
    (two jobs recorded the same call at once) is a conflict: the shared one stays, and the caller reruns
    the job that made it, so its tables come from the shared recordings. In live mode every recording is
    appended, as one process recording twice would (the last recording of a key replays).
    """
    current = settings()
    conflicts = []
    for name, text in sorted(recorded.items()):
        cassette = current.workbook_recordings / Path(name).name  # a file name, never a path elsewhere
        cassette.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(cassette) + ".lock"):
            shared = _read_cassette(cassette)
            for key, entry in _parse_cassette(text, f"{name} from a worker").items():
                if key in shared and shared[key]["reply"] == entry["reply"]:
                    continue
                if key in shared and current.workbook_record_mode != "live":
                    conflicts.append((cassette.name, *key))
                    continue
                append_line(cassette, _redact_secrets(json.dumps(entry, ensure_ascii=False)) + "\n")
    return conflicts


def shared_recordings(recorded: dict[str, str]) -> dict[str, str]:
    """Return the shared cassettes' recordings of every key in `recorded` (file name -> JSONL text, as
    `merge_recordings` takes): what a rerun of a conflicting job must replay."""
    directory = settings().workbook_recordings
    lines = {}
    for name, text in recorded.items():
        shared = _read_cassette(directory / Path(name).name)
        keys = [key for key in _parse_cassette(text, name) if key in shared]
        lines[name] = "".join(json.dumps(shared[key], ensure_ascii=False) + "\n" for key in keys)
    return lines


def _seed_for(digest: str, occurrence: int) -> int:
    return int(hashlib.sha256(f"{digest}:{occurrence}".encode()).hexdigest()[:8], 16)


def _read_cassette(cassette: Path) -> dict[tuple[str, int], dict]:
    return _parse_cassette(cassette.read_text(encoding="utf-8"), cassette) if cassette.exists() else {}


def _parse_cassette(text: str, cassette: Path | str) -> dict[tuple[str, int], dict]:
    entries = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            log.warning("%s line %d is not valid JSON (an interrupted write?); skipped", cassette, number)
            continue
        key = _entry_key(entry)
        if key is None:
            log.warning(
                "%s line %d is not a recording (no string 'digest', integer 'occurrence' and 'reply'); skipped",
                cassette,
                number,
            )
            continue
        entries[key] = entry
    return entries


def _entry_key(entry: object) -> tuple[str, int] | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("reply"), dict):
        return None
    digest, occurrence = entry.get("digest"), entry.get("occurrence")
    if not isinstance(digest, str) or not isinstance(occurrence, int) or isinstance(occurrence, bool):
        return None
    return digest, occurrence


def _prompt_head(request: dict, lines: int = 3) -> str:
    text = request["contents"][-1]["text"] if request["contents"] else request["system"]
    return "\n".join(text.strip().splitlines()[:lines])[:300]


def _miss_message(request: dict, digest: str, occurrence: int, cassette: Path) -> str:
    return (
        f"No recording for model {request['model']}, request digest {digest} "
        f"(occurrence {occurrence}) in {cassette}.\nPrompt begins:\n"
        + "\n".join("    " + line for line in _prompt_head(request).splitlines())
        + "\nA prompt, evalset or parameter changed since the recordings were made. Record the "
        "missing calls with WORKBOOK_RECORD_MODE=auto (or `make report LIVE=1`), then commit data/recordings."
    )


def _redact_secrets(text: str) -> str:
    for secret in credential_values():
        text = text.replace(secret, "[REDACTED]")
    return text


_CREDENTIAL_NAME = re.compile(r"(_API_KEY|_TOKEN|_SECRET)$", re.I)


def credential_values() -> list[str]:
    """Return the credential values a cassette must never contain: every secret setting (GOOGLE_API_KEY)
    and every environment variable whose name ends in _API_KEY, _TOKEN or _SECRET (8 characters or more)."""
    current = settings()
    values = [
        value.get_secret_value()
        for name in type(current).model_fields
        if isinstance(value := getattr(current, name), SecretStr)
    ]
    values += [value for key, value in os.environ.items() if _CREDENTIAL_NAME.search(key)]
    return sorted({value for value in values if len(value) >= 8}, key=len, reverse=True)
