"""Benchmark the model layer against the raw llama.cpp binding, and replay against live calls.

Prints ratios measured in one run (this machine is noisy; absolute numbers are not the point):
- prompt reading and generation tokens/s through LocalLlm (ADK's interface, cassettes, saved prompt
  states) vs xllamacpp's server called directly; `RATIO model_layer_vs_raw_binding` is the lower of the two;
- the latency of a replayed call vs a live one;
- `PEAK_RSS_MIB`: this process's largest resident memory (one model loaded).

Usage: .venv/bin/python benchmarks/bench_models.py [local/qwen-0.5b] [rounds]
Needs the model weights (`make models`). Nothing is written to data/recordings.
"""

import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
import uuid

from google.adk.models.llm_request import LlmRequest
from google.adk.models.registry import LLMRegistry
from google.genai import types

import helpers
from workbook.llama import local_engine

os.environ["WORKBOOK_RECORDINGS"] = tempfile.mkdtemp(prefix="bench-recordings-")
os.environ["WORKBOOK_PROMPT_CACHE"] = tempfile.mkdtemp(prefix="bench-prompt-states-")
helpers.use_record_mode("auto")  # also re-reads the settings, so the scratch folders apply

MODEL = sys.argv[1] if len(sys.argv) > 1 else "local/qwen-0.5b"
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
FILLER = " ".join(f"Fact {i}: the archivist keeps record number {i} in the tower." for i in range(60))


def _prompt_heavy() -> tuple[str, str, int]:
    """A fresh ~900-token prompt (a nonce defeats the prefix cache) and a 1-token answer."""
    return f"[{uuid.uuid4()}] You keep records. {FILLER}", "Reply with one word: ok.", 1


def _generation_heavy() -> tuple[str, str, int]:
    return f"[{uuid.uuid4()}] You are verbose.", "Count from 1 to 200 in words, separated by commas.", 96


def raw_call(system: str, user: str, max_tokens: int) -> tuple[float, int, int]:
    engine = local_engine(MODEL)
    body = {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": 1,
    }
    started = time.perf_counter()
    reply = engine.server.handle_chat_completions(body)  # the binding itself, none of the workbook's layer
    return time.perf_counter() - started, reply["usage"]["prompt_tokens"], reply["usage"]["completion_tokens"]


def workbook_call(system: str, user: str, max_tokens: int) -> tuple[float, int, int, LlmRequest]:
    request = LlmRequest(
        model=MODEL,
        contents=[types.Content(role="user", parts=[types.Part(text=user)])],
        config=types.GenerateContentConfig(system_instruction=system, max_output_tokens=max_tokens, temperature=0.0),
    )
    llm = LLMRegistry.new_llm(MODEL)

    async def call():
        return [r async for r in llm.generate_content_async(request)][-1]

    started = time.perf_counter()
    response = asyncio.run(call())
    usage = response.usage_metadata
    return time.perf_counter() - started, usage.prompt_token_count, usage.candidates_token_count, request


def main() -> None:
    local_engine(MODEL)  # load once, outside the timings
    rates = {"raw": {"prompt": [], "generation": []}, "workbook": {"prompt": [], "generation": []}}
    replay_ratios = []
    for _ in range(ROUNDS):
        for kind, make in (("prompt", _prompt_heavy), ("generation", _generation_heavy)):
            system, user, max_tokens = make()
            seconds, prompt_tokens, output_tokens = raw_call(system, user, max_tokens)
            rates["raw"][kind].append((prompt_tokens if kind == "prompt" else output_tokens) / seconds)
            system, user, max_tokens = make()
            seconds, prompt_tokens, output_tokens, request = workbook_call(system, user, max_tokens)
            rates["workbook"][kind].append((prompt_tokens if kind == "prompt" else output_tokens) / seconds)
            live_seconds = seconds
        helpers.use_record_mode("replay")
        helpers.reset_occurrences()
        replay_seconds = workbook_call(
            request.config.system_instruction, request.contents[0].parts[0].text, request.config.max_output_tokens
        )[0]
        helpers.use_record_mode("auto")
        replay_ratios.append(live_seconds / replay_seconds)
    print(f"# model {MODEL}, {ROUNDS} rounds, medians:")
    ratios = []
    for kind in ("prompt", "generation"):
        raw, ours = statistics.median(rates["raw"][kind]), statistics.median(rates["workbook"][kind])
        ratios.append(ours / raw)
        print(
            f"#  {kind:<10} raw xllamacpp {raw:7.1f} tok/s | workbook LocalLlm {ours:7.1f} tok/s | ratio {ours / raw:.2f}"
        )
    print(f"#  a live call took {statistics.median(replay_ratios):.0f}x as long as replaying it")
    print(f"RATIO model_layer_vs_raw_binding {min(ratios):.2f}")
    print(f"PEAK_RSS_MIB bench_models {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}")


if __name__ == "__main__":
    main()
