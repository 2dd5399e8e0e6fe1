"""The llama.cpp engine behind `local/...` models: one loaded model per file, requests as chat bodies."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from workbook.judge_formats import judge_output_constraint
from workbook.prompt_cache import PromptCache, prompt_cache_dir
from workbook.settings import WorkbookError, settings
from workbook.weights import local_model_path

log = logging.getLogger(__name__)


class LocalEngine:
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
        prompt_cache_dir().mkdir(parents=True, exist_ok=True)
        params.slot_save_path = f"{prompt_cache_dir()}/"  # llama.cpp appends file names to it as text
        self.path = path
        self.server = xllamacpp.Server(params)
        self.prompt_cache = PromptCache(path, self.post)
        self._lock = threading.Lock()

    def chat(self, body: dict) -> dict:
        """Return llama.cpp's OpenAI-style chat completion for a request body."""
        # One slot (n_parallel 1), so calls queue in llama.cpp anyway; the lock keeps a prefix's
        # restore, the call and the save of its state together.
        with self._lock:
            key = self.prompt_cache.key(body["messages"])
            self.prompt_cache.before(key)
            reply = self.server.handle_chat_completions(body)
            self.prompt_cache.after(None if "error" in reply else key)
        if "error" in reply:
            raise WorkbookError(f"llama.cpp refused the request for {self.path.name}: {reply['error']}")
        return reply

    def post(self, path: str, body: dict) -> dict:
        """Return the JSON answer of this model's in-process llama.cpp server to a POST (loopback only)."""
        request = urllib.request.Request(
            self.server.listening_address + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())


_ENGINES: dict[Path, LocalEngine] = {}
_ENGINES_LOCK = threading.Lock()


def local_engine(model: str) -> LocalEngine:
    """Return the process-wide llama.cpp engine for a `local/...` model, loading it once."""
    path = local_model_path(model)
    with _ENGINES_LOCK:
        if path not in _ENGINES:
            _ENGINES[path] = LocalEngine(path)
        return _ENGINES[path]


def loaded_models() -> list[Path]:
    """Return the GGUF files this process has loaded into llama.cpp so far."""
    return list(_ENGINES)


_DEFAULT_LOCAL_TEMPERATURE = 0.7  # used when a request sets none (ADK judges usually do not)
_warned_thinking = False


async def local_generate(request: dict, seed: int) -> dict:
    """Return a local model's reply to a normalized request, as the cassettes store it."""
    engine = await asyncio.to_thread(local_engine, request["model"])
    body = _chat_body(request, seed)
    started = time.perf_counter()
    reply = await asyncio.to_thread(engine.chat, body)
    latency = time.perf_counter() - started
    choice = reply["choices"][0]
    usage = reply.get("usage", {})
    return {
        **reply_message(choice["message"], request),
        "finish_reason": "MAX_TOKENS" if choice.get("finish_reason") == "length" else "STOP",
        "usage": {
            "prompt_tokens": usage.get("prompt_tokens", 0),
            "output_tokens": usage.get("completion_tokens", 0),
            "thinking_tokens": 0,
            "cached_prompt_tokens": reply.get("timings", {}).get("cache_n", 0),
        },
        "latency_s": round(latency, 3),
        "constrained": next((key for key in ("grammar", "json_schema") if key in body), None),
        **_token_logprobs(choice),
    }


def _token_logprobs(choice: dict) -> dict:
    # llama.cpp reports each token's log-probability before sampling (so before the grammar), with the
    # most likely alternatives; stored in Gemini's LogprobsResult layout (workbook.models maps both).
    tokens = (choice.get("logprobs") or {}).get("content")
    if not tokens:
        return {}
    return {
        "logprobs": {
            "chosen": [[token["token"], round(token["logprob"], 4)] for token in tokens],
            "top": [[[top["token"], round(top["logprob"], 4)] for top in token["top_logprobs"]] for token in tokens],
        }
    }


def _chat_body(request: dict, seed: int) -> dict:
    global _warned_thinking
    config = request["config"]
    if "thinking_budget" in config and not _warned_thinking:
        log.warning("local models have no thinking mode: thinking_config is ignored")
        _warned_thinking = True
    messages = [{"role": "system", "content": request["system"]}] if request["system"] else []
    messages += chat_messages(request["contents"])
    body: dict[str, Any] = {
        "messages": messages,
        "temperature": config.get("temperature", _DEFAULT_LOCAL_TEMPERATURE),
        "seed": seed,
        "max_tokens": 512,
    }
    if config.get("response_logprobs"):
        body["logprobs"], body["top_logprobs"] = True, config.get("logprobs") or 5
    if request.get("tools"):  # the GGUF's chat template renders them (Qwen2.5: a <tools> block)
        body["tools"] = [{"type": "function", "function": _without_titles(d)} for d in request["tools"]]
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


def chat_messages(contents: list[dict]) -> list[dict]:
    """Return OpenAI-style chat messages for normalized turns: model tool calls become assistant
    tool_calls, tool results become `tool` messages answering them in order (ids are positional)."""
    messages: list[dict] = []
    pending: list[str] = []
    for number, turn in enumerate(contents):
        if turn.get("tool_calls"):
            pending = [f"call_{number}_{index}" for index in range(len(turn["tool_calls"]))]
            calls = [
                {"id": ident, "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["args"])}}
                for ident, c in zip(pending, turn["tool_calls"], strict=True)
            ]
            messages.append({"role": "assistant", "content": turn["text"], "tool_calls": calls})
        elif turn.get("tool_responses"):
            for index, response in enumerate(turn["tool_responses"]):
                ident = pending[index] if index < len(pending) else f"call_{number}_{index}"
                messages.append({"role": "tool", "tool_call_id": ident, "content": json.dumps(response["response"])})
        else:
            messages.append({"role": "assistant" if turn["role"] == "model" else "user", "content": turn["text"]})
    return messages


def _without_titles(value: Any) -> Any:
    # Pydantic titles every schema ("get_race_resultsParams"); a small model copies that title as the
    # tool's name, so the rendered declaration leaves titles out (the recording key keeps the schema whole).
    if isinstance(value, dict):
        return {key: _without_titles(item) for key, item in value.items() if key != "title"}
    if isinstance(value, list):
        return [_without_titles(item) for item in value]
    return value


# Qwen2.5-Coder often writes a call as a ```json fence instead of its template's <tool_call> tags,
# and llama.cpp's parser then leaves it as text. Either layout, holding exactly a declared tool's
# name and arguments, is the model's own call.
_CALL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>|```(?:json)?\s*(\{.*?\})\s*```", re.S)


def reply_message(message: dict, request: dict) -> dict:
    """Return a chat reply as the cassettes store it: text, and tool_calls (name, args) when the model
    called a declared tool; raw_text keeps the model's own text when a call was read from it."""
    names = {declaration["name"] for declaration in request.get("tools", [])}
    text = message.get("content") or ""
    calls = [
        {"name": c["function"]["name"], "args": json.loads(c["function"].get("arguments") or "{}")}
        for c in message.get("tool_calls") or []
    ]
    if calls:
        return {"text": text, "tool_calls": calls}
    calls = _calls_in_text(text, names) if names else []
    return {"text": "", "tool_calls": calls, "raw_text": text} if calls else {"text": text}


def _calls_in_text(text: str, names: set[str]) -> list[dict]:
    blocks = [tagged or fenced for tagged, fenced in _CALL_BLOCK.findall(text)] or [text.strip()]
    calls = []
    for block in blocks:
        try:
            data = json.loads(block)
        except json.JSONDecodeError:
            return []
        if not isinstance(data, dict) or data.get("name") not in names or not isinstance(data.get("arguments"), dict):
            return []
        calls.append({"name": data["name"], "args": data["arguments"]})
    return calls


def render_chat_via_server(model: str, system: str, turns: list[str]) -> str:
    """Return the exact text a local model reads, as its llama.cpp server renders system and turns.

    This loads the model and makes an HTTP request to its in-process server's /apply-template
    (loopback only). `turns` alternate user, model, user, ... as in a conversation.
    """
    request = {
        "model": model,
        "system": system,
        "contents": [{"role": "user" if i % 2 == 0 else "model", "text": t} for i, t in enumerate(turns)],
        "config": {},
    }
    return local_engine(model).post("/apply-template", {"messages": _chat_body(request, seed=0)["messages"]})["prompt"]
