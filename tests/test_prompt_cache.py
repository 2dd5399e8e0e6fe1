"""Saved prompt states (workbook/prompt_cache.py), live on the smallest model: a fresh process restores a
long shared prefix instead of re-reading it, the reply stays what a cold process gives, and the folder
stays within its bound."""

import json
import math
import os
import subprocess
import sys

from conftest import REPO

from workbook.prompt_cache import evict, shared_prefix

SMALL = "local/smollm2-135m"
FACTS = " ".join(f"Fact {i}: record {i} of the archive is kept on shelf {i % 7} of the tower." for i in range(30))

# Each process is fresh, as a papermill kernel is: it loads the model and calls it with the given requests.
_CALLS = """
import json, sys
from workbook.llama import local_generate
from workbook.util import run_sync
for request in json.loads(sys.argv[1]):
    print(json.dumps(run_sync(local_generate(request, seed=7))))
"""


def _request(system: str, question: str) -> dict:
    config = {"max_output_tokens": 12}
    return {"model": SMALL, "system": system, "contents": [{"role": "user", "text": question}], "config": config}


def _fresh_process(requests: list[dict], **env: str) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-c", _CALLS, json.dumps(requests)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_fresh_process_restores_a_saved_prefix_and_the_bound_evicts(tmp_path):
    cache = tmp_path / "model-cache"
    states = cache / "prompt-cache"
    archive, other = f"You keep the archive. {FACTS}", f"You keep the other archive. {FACTS}"
    env = {"WORKBOOK_MODEL_CACHE": str(cache)}

    (first,) = _fresh_process([_request(archive, "Where is record 3?")], **env)
    assert first["usage"]["cached_prompt_tokens"] == 0
    (saved,) = states.glob("*.slot")
    bound_mib = math.ceil(1.5 * saved.stat().st_size / 2**20)  # room for one state, not two

    restored, second_prefix = _fresh_process(
        [_request(archive, "Where is record 5?"), _request(other, "Where is record 5?")],
        **env,
        WORKBOOK_PROMPT_CACHE_MIB=str(bound_mib),
    )
    prefix_tokens = first["usage"]["prompt_tokens"] - 20  # the question and the chat template's last tokens differ
    assert restored["usage"]["cached_prompt_tokens"] >= prefix_tokens
    assert second_prefix["usage"]["cached_prompt_tokens"] < 20  # only the chat template's first tokens
    (kept,) = states.glob("*.slot")
    assert kept != saved and not saved.exists()  # the bound evicted the older state

    (cold,) = _fresh_process([_request(archive, "Where is record 5?")], **env, WORKBOOK_PROMPT_CACHE_MIB="0")
    assert cold["usage"]["cached_prompt_tokens"] == 0
    assert cold["text"] == restored["text"]  # restoring skips the reading, not the model's answer


def test_only_long_shared_prefixes_are_saved_and_the_oldest_states_go_first(tmp_path):
    """Plumbing: the prefix is the system instruction (judge preambles: see test_models), and eviction
    deletes by age until the folder fits."""
    messages = [{"role": "system", "content": "short"}, {"role": "user", "content": "Where is record 3?"}]
    assert shared_prefix(messages) == "short\n"
    for age, name in enumerate(["old", "middle", "new"]):
        path = tmp_path / f"{name}.slot"
        path.write_bytes(b"x" * 100)
        os.utime(path, (1000 + age, 1000 + age))
    assert [path.name for path in evict(tmp_path, 150)] == ["old.slot", "middle.slot"]
    assert [path.name for path in tmp_path.iterdir()] == ["new.slot"]
