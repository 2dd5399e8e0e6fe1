"""The lore archivist: prompt versions, the agent, chat, and notebook 01 in strict replay."""

import pytest
from notebook_runner import has_image, outputs_text, progress_bar_remnants, run_notebook, stderr_outputs

import helpers


def test_four_prompt_versions_and_only_v3_v4_have_known_facts():
    assert helpers.prompt_versions() == ["v1", "v2", "v3", "v4"]
    has_facts = {v: "## Known facts" in helpers.load_prompt(v).instruction for v in helpers.prompt_versions()}
    assert has_facts == {"v1": False, "v2": False, "v3": True, "v4": True}
    assert "I Am Torchbearer" in helpers.load_prompt("v4").instruction
    assert "I Am Torchbearer" not in helpers.load_prompt("v3").instruction


def test_header_comment_never_reaches_the_model():
    prompt = helpers.load_prompt("v2")
    agent = helpers.build_archivist("v2", model="local/smollm2-135m")
    assert "Forced by" in prompt.header or "Changes" in prompt.header
    assert prompt.header not in agent.instruction
    assert "<!--" not in agent.instruction and "-->" not in agent.instruction


def test_unknown_version_lists_the_known_ones():
    with pytest.raises(helpers.WorkbookError, match="v1, v2, v3, v4"):
        helpers.build_archivist("v9")


def test_prompt_diff_shows_added_known_facts():
    diff = helpers.prompt_diff("v2", "v3")
    assert "+## Known facts" in diff
    assert not any(line.startswith("-## Known facts") for line in diff.splitlines())


def test_agent_has_no_tools_and_thinking_budget_is_optional():
    agent = helpers.build_archivist("v4", model="gemini-2.5-flash", thinking_budget=64)
    assert agent.tools == []
    assert agent.generate_content_config.thinking_config.thinking_budget == 64
    assert not agent.generate_content_config.thinking_config.include_thoughts


def test_multi_turn_chat_keeps_one_session(recordings):
    """Live on the smallest model: the second turn's prompt must contain the first exchange."""
    agent = helpers.build_archivist("v1", model="local/smollm2-135m", max_output_tokens=24)
    with helpers.call_log() as calls:
        table = helpers.chat(agent, ["Who is Nico?", "And the Torchbearer?"])
    assert list(table.turn) == [1, 2]
    assert table.prompt_tokens[1] > table.prompt_tokens[0] + table.output_tokens[0]
    assert set(table.columns) >= {"answer", "output_tokens", "thinking_tokens", "latency_s", "model", "replayed"}
    second_call = calls[-1]["request"]["contents"]
    assert [turn["role"] for turn in second_call] == ["user", "model", "user"]
    assert second_call[1]["text"] == table.answer[0]


def test_notebook_01_runs_in_strict_replay(tmp_path):
    notebook = run_notebook("01_build_the_archivist.ipynb", tmp_path)
    text = outputs_text(notebook)
    assert "record mode 'replay'" in text
    assert "Of 12 answers, 12 were replayed" in text  # 6 questions x 2 versions, all from recordings
    assert "Who is Blurryface?" in text and "v1" in text and "v4" in text
    assert "prompt_tokens" in text and "output_tokens" in text
    assert has_image(notebook)
    assert stderr_outputs(notebook) == [] and progress_bar_remnants(notebook) == []  # no warnings, no stale bars
    # offline, the thinking sweep says why there is nothing to sweep (computed), instead of a no-op
    assert "**Nothing to sweep:** `local/qwen-0.5b` has no thinking mode, so the budgets [0, 256, 1024]" in text
