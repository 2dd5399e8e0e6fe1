"""Live benchmarks of new model calls, printed as `RATIO <name> <value>` lines, each from one run.

- run_eval_vs_adk_eval_live: wall time of the workbook's run_eval over adk eval's, each a fresh process
  from empty cassettes and an empty prompt-state folder (weights assembled first, outside the timing):
  the same 4 cases of the final evalset, final_response_match_v2 x3 samples, agent qwen-0.5b v4,
  judge qwen-1.5b.
- first_judge_call_restored_vs_cold: the first rubric judge call (5 rubrics, the archivist's v4
  instruction in the prompt) of a fresh process that restores the saved judge prompt state, over the
  same call in a fresh process with the prompt-state folder turned off. A third, earlier process
  judges another answer to save the state. The two replies must be the same text.
- judge_tokens_bounded_vs_free: output tokens of the same rubric judge request in the bounded format
  (v2, default bounds) over the free format (v1).
- PEAK_RSS_MIB: the largest resident memory of any process this benchmark started.

Usage: .venv/bin/python benchmarks/bench_live.py [run_eval] [judge]   (default both; needs `make models`;
minutes of live calls: two cold ~4k-token judge prompts and two 4-case evals)
Every call is recorded into scratch folders; nothing is written to data/recordings.
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AGENT, JUDGE = "local/qwen-0.5b", "local/qwen-1.5b"
RUBRIC_JUDGE = "local/qwen-0.5b"  # the cheaper judge keeps two cold ~4k-token prompts within minutes
CASES = ["breach_sequel", "dema_depression", "who_is_blurryface", "torchbearer_who_plays"]
SCRATCH = Path(tempfile.mkdtemp(prefix="bench-live-"))


def scratch_env(name: str, **extra: str) -> dict:
    """Return an environment whose recordings, outputs, prompt states and ADK history are fresh scratch folders."""
    folder = SCRATCH / name
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "WORKBOOK_PROGRESS": "off",
        "WORKBOOK_RECORD_MODE": "auto",
        "WORKBOOK_RECORDINGS": str(folder / "recordings"),
        "WORKBOOK_OUTPUTS": str(folder / "outputs"),
        "WORKBOOK_PROMPT_CACHE": str(folder / "prompt-states"),
        **extra,
    }


def timed(command: list[str], env: dict) -> tuple[float, str]:
    """Return (wall seconds, stdout) of a command run to completion in the repository."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):  # adk eval exits 1 when a case fails its threshold
        sys.exit(f"{command[:3]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return time.perf_counter() - started, done.stdout


def run_eval_vs_adk_eval() -> float:
    python, adk = sys.executable, str(Path(sys.executable).parent / "adk")
    evalset = f"{REPO / 'data' / 'evalsets' / 'final.evalset.json'}:{','.join(CASES)}"
    config = str(REPO / "data" / "configs" / "final_reference.json")
    adk_seconds, _ = timed(
        [adk, "eval", "agents/lore_archivist", evalset, "--config_file_path", config], scratch_env("adk")
    )
    run_eval = (
        f"import helpers; helpers.run_eval(helpers.build_archivist('v4', model='{AGENT}'), 'final', "
        f"'final_reference', judge_model='{JUDGE}', case_ids={CASES!r}, run_id='bench', show_findings=False)"
    )
    ours, _ = timed([python, "-c", run_eval], scratch_env("run_eval"))
    print(f"# run_eval {ours:.0f} s vs adk eval {adk_seconds:.0f} s (4 cases, live, empty cassettes and prompt states)")
    return ours / adk_seconds


def judge_process(answer_id: str, *formats: str) -> None:
    """In a fresh process: judge one frozen answer with final_behaviour's rubrics in each format; print
    one line per call, `CALL` and its JSON (latency, tokens, text)."""
    from google.adk.evaluation.eval_set import EvalSet

    import helpers
    from workbook.llama import local_engine
    from workbook.panel import single_turn_case

    answers = helpers.load_frozen_answers().rename(columns={"id": "case", "question": "user"})
    row = answers[answers["case"] == answer_id].assign(instruction=helpers.load_prompt("v4").instruction)
    evalset = EvalSet(eval_set_id="bench", eval_cases=[single_turn_case(answer_id, row["user"].iloc[0])])
    config = helpers.with_judge("final_behaviour", RUBRIC_JUDGE)
    local_engine(RUBRIC_JUDGE)  # load the weights outside the timed call
    for judge_format in formats:
        helpers.use_judge_format(judge_format)
        with helpers.call_log() as calls:
            helpers.judge_answers(row, evalset, config, run_id=f"bench-{judge_format}")
        call = calls[-1]
        usage = {key: call["usage"][key] for key in ("output_tokens", "cached_prompt_tokens")}
        print(
            "CALL", json.dumps({"format": judge_format, "latency_s": call["latency_s"], **usage, "text": call["text"]})
        )


def first_judge_calls() -> tuple[float, float]:
    def run(name: str, answer_id: str, *formats: str, **extra: str) -> list[dict]:
        command = [sys.executable, __file__, "judge-process", answer_id, *formats]
        env = scratch_env(name, WORKBOOK_PROMPT_CACHE=str(SCRATCH / "prompt-states"), **extra)
        lines = timed(command, env)[1].splitlines()  # judge_answers prints its summary line too
        return [json.loads(line.removeprefix("CALL ")) for line in lines if line.startswith("CALL ")]

    run("warm-up", "blurryface_right", "v1")  # saves the judge's prompt state
    restored, bounded = run("restored", "ned_canon", "v1", "v2")
    (cold,) = run("cold", "ned_canon", "v1", WORKBOOK_PROMPT_CACHE_MIB="0")
    same = "same reply" if restored["text"] == cold["text"] else "REPLIES DIFFER: a restored state changed the reply"
    print(
        f"# first rubric judge call ({RUBRIC_JUDGE}): restored {restored['latency_s']:.1f} s "
        f"({restored['cached_prompt_tokens']} prompt tokens restored) vs cold {cold['latency_s']:.1f} s; {same}"
    )
    print(
        f"# judge output tokens, same request: bounded {bounded['output_tokens']} vs free {restored['output_tokens']}"
    )
    return restored["latency_s"] / cold["latency_s"], bounded["output_tokens"] / restored["output_tokens"]


def main(parts: list[str]) -> None:
    from workbook.weights import local_model_path

    for model in (AGENT, JUDGE):
        local_model_path(model)  # assembled and verified before any timing
    if "run_eval" in parts:
        print(f"RATIO run_eval_vs_adk_eval_live {run_eval_vs_adk_eval():.2f}")
    if "judge" in parts:
        restored_vs_cold, bounded_vs_free = first_judge_calls()
        print(f"RATIO first_judge_call_restored_vs_cold {restored_vs_cold:.2f}")
        print(f"RATIO judge_tokens_bounded_vs_free {bounded_vs_free:.2f}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"PEAK_RSS_MIB bench_live {peak:.0f}  # the largest process this benchmark started")


if __name__ == "__main__":
    if sys.argv[1:2] == ["judge-process"]:
        judge_process(*sys.argv[2:])
    else:
        main(sys.argv[1:] or ["run_eval", "judge"])
