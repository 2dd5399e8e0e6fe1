"""Speculative decoding for a local judge: qwen-1.5b alone vs qwen-1.5b with qwen-0.5b drafting.

xllamacpp's server accepts a draft model (CommonParams.speculative) together with a GBNF grammar. This
measures, in one run, the generation speed of the same grammar-constrained rubric judge requests (the
workbook's v1 rubric grammar, sampled at the judges' temperature) on both, and how many drafted tokens
the target accepted. The workbook keeps speculative decoding only if it is at least 1.3x faster.

Usage: .venv/bin/python benchmarks/speculative.py [requests]   (needs `make models`)
"""

import statistics
import sys

import xllamacpp

from workbook.judge_formats import rubric_grammar
from workbook.settings import settings
from workbook.weights import local_model_path

TARGET, DRAFT = "local/qwen-1.5b", "local/qwen-0.5b"
PROPERTIES = [("in_scope", "The response stays on the story."), ("no_lyrics", "The response quotes no lyrics.")]
ANSWERS = [
    "Blurryface is a character who stands for Tyler Joseph's insecurities.",
    "Ned is a small creature from the Chlorine video.",
    "The bishops rule Dema; Nico is their leader.",
]


def server(draft: bool) -> xllamacpp.Server:
    threads = settings().workbook_threads
    params = xllamacpp.CommonParams()
    params.model.path = str(local_model_path(TARGET))
    params.n_ctx, params.n_parallel, params.use_jinja, params.warmup, params.verbosity = 4096, 1, True, False, -1
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    params.flash_attn_type = xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED  # as LocalEngine
    if draft:
        params.speculative.types = [xllamacpp.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
        params.speculative.draft.mparams.path = str(local_model_path(DRAFT))
        params.speculative.draft.cpuparams.n_threads = params.speculative.draft.cpuparams_batch.n_threads = threads
    return xllamacpp.Server(params)


def body(answer: str) -> dict:
    rubrics = "\n".join(f"* [id: {rubric_id}] {text}" for rubric_id, text in PROPERTIES)
    prompt = (
        "Judge the response against each property. For each, give ID, Property, Evidence, Rationale and "
        f"Verdict (yes or no).\n<response>{answer}</response>\n<properties>\n{rubrics}\n</properties>"
    )
    grammar = rubric_grammar(PROPERTIES)
    return {"messages": [{"role": "user", "content": prompt}], "grammar": grammar, "temperature": 0.7, "seed": 11}


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    rates, accepted = {}, []
    for draft in (False, True):
        engine = server(draft)
        engine.handle_chat_completions(body(ANSWERS[-1]))  # warm-up: load, and the shared template prefix
        timings = [engine.handle_chat_completions(body(answer))["timings"] for answer in ANSWERS[:count]]
        rates[draft] = statistics.median(t["predicted_per_second"] for t in timings)
        accepted += [(t["draft_n_accepted"], t["draft_n"]) for t in timings if draft]
        del engine
    drafted = sum(n for _, n in accepted)
    print(f"# {TARGET} judge generation: alone {rates[False]:.1f} tok/s, with {DRAFT} drafting {rates[True]:.1f} tok/s")
    print(f"# drafted tokens accepted: {sum(a for a, _ in accepted)} of {drafted}")
    print(f"RATIO speculative_vs_plain_generation {rates[True] / rates[False]:.2f}")


if __name__ == "__main__":
    main()
