"""The model layer: registry, local llama.cpp generation, record/replay, the Gemini path."""

import json
import math
import multiprocessing
import os
import subprocess
import sys

import pandas as pd
import pytest
from conftest import REPO, set_mode, setenv
from gemini_stub import GeminiStub
from google.adk.evaluation.eval_case import Invocation
from google.adk.evaluation.eval_metrics import (
    EvalMetric,
    JudgeModelOptions,
    LlmAsAJudgeCriterion,
    RubricsBasedCriterion,
)
from google.adk.evaluation.final_response_match_v2 import FinalResponseMatchV2Evaluator
from google.adk.evaluation.rubric_based_evaluator import DefaultAutoRaterResponseParser
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.models.registry import LLMRegistry
from google.genai import types

import helpers
from workbook.cassettes import CassetteStore, call_log, cassettes, normalize_request, request_digest
from workbook.judge_formats import judge_kind, judge_output_constraint, judge_preamble, last_prompt, verdict_probability
from workbook.llama import render_chat_via_server
from workbook.models import reply_to_llm_response
from workbook.util import text_digest
from workbook.weights import LOCAL_MODELS, LocalModelSpec, local_model_path

SMALL = "local/smollm2-135m"


def test_local_and_gemini_names_resolve_to_workbook_classes():
    assert LLMRegistry.resolve("local/qwen-1.5b") is helpers.LocalLlm
    assert LLMRegistry.resolve("local/path:/tmp/any.gguf") is helpers.LocalLlm
    assert LLMRegistry.resolve("gemini-2.5-flash") is helpers.RecordedGemini
    agent = helpers.build_archivist("v1", model=SMALL) if helpers.prompt_versions() else None
    if agent is not None:
        assert isinstance(agent.canonical_model, helpers.LocalLlm)


def test_judge_model_name_resolves_through_adk_evaluator():
    metric = EvalMetric(
        metric_name="final_response_match_v2",
        criterion=LlmAsAJudgeCriterion(
            threshold=0.5, judge_model_options=JudgeModelOptions(judge_model="local/qwen-0.5b", num_samples=1)
        ),
    )
    evaluator = FinalResponseMatchV2Evaluator(metric)
    assert isinstance(evaluator._judge_model, helpers.LocalLlm)
    assert evaluator._judge_model.model == "local/qwen-0.5b"


def test_unknown_local_model_lists_the_known_ones():
    with pytest.raises(helpers.MissingModelError, match="local/qwen-1.5b.*local/smollm2-135m"):
        local_model_path("local/qwen-70b")


def test_missing_weight_package_says_what_to_install(monkeypatch):
    spec = LocalModelSpec("ghost", ("no_such_weights_pkg",), "ghost-weights==1.0", "0" * 64)
    monkeypatch.setitem(LOCAL_MODELS, "ghost", spec)
    with pytest.raises(helpers.MissingModelError, match="ghost-weights==1.0.*make models"):
        local_model_path("local/ghost")


def test_bad_hash_is_refused_and_stamps_stay_out_of_site_packages(monkeypatch, tmp_path):
    setenv(monkeypatch, WORKBOOK_MODEL_CACHE=str(tmp_path / "cache"))
    good = LOCAL_MODELS["smollm2-135m"]
    bad = LocalModelSpec("bad", good.packages, good.pip_names, "f" * 64, single_file=good.single_file)
    monkeypatch.setitem(LOCAL_MODELS, "bad", bad)
    with pytest.raises(helpers.MissingModelError, match="expected ffff"):
        local_model_path("local/bad")
    weights = local_model_path("local/smollm2-135m")
    assert (tmp_path / "cache" / "verified" / "smollm2-135m.sha256").read_text().startswith(str(weights))


def test_chat_template_renders_system_and_every_turn():
    rendered = render_chat_via_server(SMALL, "SYSTEM-RULES", ["first question", "first answer", "second question"])
    assert rendered.index("SYSTEM-RULES") < rendered.index("first question")
    assert rendered.index("first question") < rendered.index("first answer") < rendered.index("second question")
    assert rendered.count("<|im_start|>user") == 2 and rendered.count("<|im_start|>assistant") == 2
    assert rendered.rstrip().endswith("<|im_start|>assistant")


def _request(text: str, **config) -> LlmRequest:
    return LlmRequest(
        model=SMALL,
        contents=[types.Content(role="user", parts=[types.Part(text=text)])],
        config=types.GenerateContentConfig(system_instruction="Answer in one short sentence.", **config),
    )


async def _generate(model: str, request) -> LlmResponse:
    llm = LLMRegistry.new_llm(model)
    return [response async for response in llm.generate_content_async(request)][-1]


def test_real_generation_fills_usage_and_honours_max_tokens(recordings):
    response = helpers.run_sync(_generate(SMALL, _request("Name a colour.", max_output_tokens=8, temperature=0.0)))
    assert response.content.parts[0].text.strip()
    assert response.usage_metadata.prompt_token_count > 10
    assert 0 < response.usage_metadata.candidates_token_count <= 8
    assert response.custom_metadata["replayed"] is False


def test_stop_sequences_cut_the_reply(recordings):
    request = _request("Count from 1 to 10 separated by commas.", temperature=0.0, stop_sequences=["5"])
    text = helpers.run_sync(_generate(SMALL, request)).content.parts[0].text
    assert "5" not in text and "6" not in text


def test_record_then_strict_replay_in_a_fresh_process_loads_no_model(recordings):
    request = _request("Say hello to the archivist.", temperature=0.9, max_output_tokens=20)
    live = helpers.run_sync(_generate(SMALL, request))
    script = (
        "import helpers, json\n"
        "from workbook.llama import loaded_models\n"
        "from test_models import _request, _generate, SMALL\n"
        "r = helpers.run_sync(_generate(SMALL, _request('Say hello to the archivist.', temperature=0.9,"
        " max_output_tokens=20)))\n"
        "print(json.dumps({'text': r.content.parts[0].text, 'meta': r.custom_metadata,"
        " 'prompt': r.usage_metadata.prompt_token_count, 'engines': len(loaded_models())}))\n"
    )
    env = {**os.environ, "WORKBOOK_RECORD_MODE": "replay", "PYTHONPATH": f"{REPO}:{REPO / 'tests'}"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    replayed = json.loads(done.stdout.strip().splitlines()[-1])
    assert replayed["text"] == live.content.parts[0].text
    assert replayed["meta"]["replayed"] is True
    assert replayed["meta"]["seed"] == live.custom_metadata["seed"]
    assert replayed["prompt"] == live.usage_metadata.prompt_token_count
    assert replayed["engines"] == 0


def test_strict_replay_miss_names_model_digest_and_prompt(recordings, monkeypatch):
    set_mode(monkeypatch, "replay")
    with pytest.raises(helpers.ReplayMissError) as error:
        helpers.run_sync(_generate(SMALL, _request("Who leads the nine bishops?\nSecond line")))
    message = str(error.value)
    assert SMALL in message and "Who leads the nine bishops?" in message and "Second line" in message
    digest = request_digest(normalize_request(SMALL, _request("Who leads the nine bishops?\nSecond line")))
    assert digest in message


def _scripted_live(texts):
    """A scripted stand-in for a model (plumbing test): returns the next text each call."""
    iterator = iter(texts)

    async def live_call(seed):
        return {
            "text": next(iterator),
            "finish_reason": "STOP",
            "latency_s": 0.5,
            "usage": {"prompt_tokens": 3, "output_tokens": 1, "thinking_tokens": 0},
        }

    return live_call


def test_repeated_identical_requests_replay_in_order_with_their_own_seeds(recordings, monkeypatch):
    request = {"model": "local/scripted", "system": "", "contents": [{"role": "user", "text": "judge"}], "config": {}}
    store = cassettes()
    live = _scripted_live(["valid", "invalid", "valid"])
    first = [helpers.run_sync(store.call(request, live)) for _ in range(3)]
    assert [reply["text"] for reply in first] == ["valid", "invalid", "valid"]
    assert len({reply["seed"] for reply in first}) == 3
    set_mode(monkeypatch, "replay")
    again = [helpers.run_sync(cassettes().call(request, _scripted_live([]))) for _ in range(3)]
    assert [(r["text"], r["seed"], r["replayed"]) for r in again] == [(r["text"], r["seed"], True) for r in first]
    with pytest.raises(helpers.ReplayMissError, match="occurrence 3"):
        helpers.run_sync(cassettes().call(request, _scripted_live([])))


def _append_many(directory, writer, count):
    store = CassetteStore(directory, "auto")
    for index in range(count):
        request = {"model": "local/shared", "system": "", "contents": [{"role": "user", "text": f"{writer}-{index}"}]}
        helpers.run_sync(store.call({**request, "config": {}}, _scripted_live([f"{writer}-{index} " + "x" * 2000])))


def test_two_processes_appending_to_one_cassette_leave_every_line_valid(recordings):
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_append_many, args=(str(recordings), name, 150)) for name in "ab"]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=120)
        assert writer.exitcode == 0
    lines = (recordings / "local_shared.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    assert len(entries) == 300
    assert {entry["reply"]["text"].split()[0] for entry in entries} == {f"{w}-{i}" for w in "ab" for i in range(150)}


def test_a_write_killed_mid_line_costs_only_that_call(recordings):
    store = cassettes()
    request = {"model": "local/scripted", "system": "", "contents": [{"role": "user", "text": "q"}], "config": {}}
    helpers.run_sync(store.call(request, _scripted_live(["kept"])))
    cassette = store.cassette_path("local/scripted")
    with open(cassette, "a") as handle:
        handle.write('{"digest": "half-writ')  # what a kill during a write leaves behind
    other = {**request, "contents": [{"role": "user", "text": "another"}]}
    helpers.run_sync(store.call(other, _scripted_live(["also kept"])))
    fresh = CassetteStore(recordings, "replay")
    assert helpers.run_sync(fresh.call(request, _scripted_live([])))["text"] == "kept"
    assert helpers.run_sync(fresh.call(other, _scripted_live([])))["text"] == "also kept"


def test_gemini_path_through_google_genai_against_a_loopback_stub(recordings, monkeypatch):
    stub = GeminiStub()
    secret = "AIzaTEST-secret-key-1234567890"
    setenv(monkeypatch, GOOGLE_API_KEY=secret, GEMINI_BASE_URL=stub.url)
    try:
        agent = helpers.build_archivist("v4", model="gemini-2.5-flash", thinking_budget=128)
        table = helpers.chat(agent, ["Who is Blurryface?"])
        judge = helpers.run_sync(_generate("gemini-2.5-pro", _request("Judge this answer.")))
    finally:
        stub.close()
    assert table.loc[0, "answer"] == stub.reply_text
    assert (table.loc[0, "prompt_tokens"], table.loc[0, "output_tokens"], table.loc[0, "thinking_tokens"]) == (42, 9, 5)
    assert judge.content.parts[0].text == stub.reply_text
    assert len(stub.requests) == 2
    agent_call = stub.requests[0]
    assert agent_call["path"].endswith("models/gemini-2.5-flash:generateContent")
    assert agent_call["headers"].get("x-goog-api-key") == secret
    assert "Known facts" in json.dumps(agent_call["body"]["systemInstruction"])
    thinking = agent_call["body"]["generationConfig"]["thinkingConfig"]
    assert 128 in (thinking.get("thinkingBudget"), thinking.get("thinking_budget"))
    written = "".join(path.read_text() for path in recordings.glob("*.jsonl"))
    assert "gemini-2.5-flash" in written and secret not in written


def test_gemini_logprobs_are_asked_for_recorded_and_replayed(recordings, monkeypatch):
    """The Gemini path of P(yes): the judge config's logprobs settings reach the API, and the candidate's
    logprobsResult is kept in the same layout as llama.cpp's and given back on replay (stub: plumbing)."""
    reply = '{"reasoning": "ok", "is_the_agent_response_valid": "valid"}'
    chosen = [{"token": reply[:-8], "logProbability": -0.2}, {"token": 'valid"}', "logProbability": -0.3}]
    top = [{"candidates": [chosen[0]]}, {"candidates": [chosen[1], {"token": 'invalid"}', "logProbability": -1.5}]}]
    stub = GeminiStub(reply_text=reply, logprobs={"chosenCandidates": chosen, "topCandidates": top})
    setenv(monkeypatch, GOOGLE_API_KEY="AIzaTEST-key", GEMINI_BASE_URL=stub.url)
    request = _request("Judge this answer.", temperature=0, response_logprobs=True, logprobs=2)
    try:
        live = helpers.run_sync(_generate("gemini-2.5-pro", request))
    finally:
        stub.close()
    generation = stub.requests[0]["body"]["generationConfig"]
    assert generation["responseLogprobs"] is True and generation["logprobs"] == 2
    set_mode(monkeypatch, "replay")
    replayed = helpers.run_sync(_generate("gemini-2.5-pro", request))
    assert replayed.custom_metadata["replayed"] is True
    for response in (live, replayed):
        assert [c.token for c in response.logprobs_result.chosen_candidates] == [reply[:-8], 'valid"}']
    stored = json.loads(next(recordings.glob("gemini*.jsonl")).read_text().splitlines()[0])["reply"]
    assert verdict_probability(reply, stored["logprobs"]) == pytest.approx(1 / (1 + math.exp(-1.2)))


def test_gemini_without_credentials_fails_early_with_the_fix(recordings, monkeypatch):
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    setenv(monkeypatch, GEMINI_BASE_URL="http://127.0.0.1:9")
    with pytest.raises(helpers.CredentialsError, match="GOOGLE_API_KEY.*local/qwen-1.5b"):
        helpers.run_sync(_generate("gemini-2.5-flash", _request("hi")))


def _invocation(user: str, answer: str) -> Invocation:
    return Invocation(
        user_content=types.Content(role="user", parts=[types.Part(text=user)]),
        final_response=types.Content(role="model", parts=[types.Part(text=answer)]),
    )


def test_reference_judge_reply_is_accepted_by_adks_parser(recordings):
    metric = EvalMetric(
        metric_name="final_response_match_v2",
        criterion=LlmAsAJudgeCriterion(
            threshold=0.5, judge_model_options=JudgeModelOptions(judge_model=SMALL, num_samples=1)
        ),
    )
    evaluator = FinalResponseMatchV2Evaluator(metric)
    actual = _invocation("What colour is Trench?", "Trench is yellow.")
    expected = _invocation("What colour is Trench?", "Yellow.")
    with call_log() as calls:
        result = helpers.run_sync(evaluator.evaluate_invocations([actual], [expected]))
    assert result.per_invocation_results[0].score in (0.0, 1.0)  # None would mean ADK could not parse it
    reply = calls[-1]
    assert reply["constrained"] == "grammar"
    assert json.loads(reply["text"])["is_the_agent_response_valid"] in ("valid", "invalid")


def test_reference_judge_with_logprobs_gives_p_yes_that_replays(recordings, monkeypatch):
    """Live on the smallest model: log-probabilities on in the judge's config reach llama.cpp, the reply keeps
    them, P(yes) agrees with the label the grammar let the model choose, and strict replay gives them back."""
    config = types.GenerateContentConfig(temperature=0, response_logprobs=True, logprobs=5)
    options = JudgeModelOptions(judge_model=SMALL, num_samples=1, judge_model_config=config)
    metric = EvalMetric(
        metric_name="final_response_match_v2",
        criterion=LlmAsAJudgeCriterion(threshold=0.5, judge_model_options=options),
    )
    actual = _invocation("What colour is Trench?", "Trench is yellow.")
    expected = _invocation("What colour is Trench?", "Yellow.")

    def judge_once() -> dict:
        with call_log() as calls:
            helpers.run_sync(FinalResponseMatchV2Evaluator(metric).evaluate_invocations([actual], [expected]))
        return calls[-1]

    live = judge_once()
    assert live["request"]["config"] == {"temperature": 0.0, "response_logprobs": True, "logprobs": 5}
    logprobs = live["logprobs"]
    assert "".join(token for token, _ in logprobs["chosen"]) == live["text"]
    assert len(logprobs["top"]) == len(logprobs["chosen"]) and all(len(top) == 5 for top in logprobs["top"])
    p_yes = verdict_probability(live["text"], logprobs)
    label = json.loads(live["text"])["is_the_agent_response_valid"]
    assert 0.0 <= p_yes <= 1.0 and (p_yes >= 0.5) == (label == "valid")  # greedy picks the likelier label
    set_mode(monkeypatch, "replay")
    replayed = judge_once()
    assert replayed["replayed"] is True and replayed["logprobs"] == logprobs
    response = reply_to_llm_response(replayed)
    assert [c.token for c in response.logprobs_result.chosen_candidates] == [t for t, _ in logprobs["chosen"]]


def test_p_yes_reads_the_label_token_from_the_end_and_renormalizes_over_both_labels():
    """Hand-made log-probabilities (no model): the label starts inside a token, a multi-byte character earlier
    in the reasoning is split over two tokens, and an alternative that is neither label does not count."""
    text = '{"reasoning": "São", "is_the_agent_response_valid": "invalid"}'
    tokens = ['{"reasoning": "S', "\ufffd", "\ufffd", 'o", ', '"is_the_agent_response_valid": ', '"in', "valid", '"}']
    assert len("".join(tokens)) == len(text) + 1  # offsets counted from the start would be off by one
    at_label = [['"in', math.log(0.3)], ['"valid', math.log(0.1)], ['"v', math.log(0.1)], ["x", math.log(0.5)]]
    logprobs = {"chosen": [[token, -0.1] for token in tokens], "top": [[] for _ in tokens]}
    logprobs["chosen"][5], logprobs["top"][5] = ['"in', math.log(0.3)], at_label
    assert verdict_probability(text, logprobs) == pytest.approx(0.2 / 0.5)
    assert verdict_probability('{"reasoning": "no label"}', logprobs) is None
    logprobs["chosen"][5], logprobs["top"][5] = ['"xy', math.log(0.5)], [["x", math.log(0.5)]]
    assert verdict_probability(text, logprobs) is None  # neither label among the alternatives


@pytest.mark.parametrize("judge_format", ["v1", "v2"])
def test_rubric_judge_reply_is_accepted_by_adks_parser(recordings, monkeypatch, judge_format):
    """Both formats, live on the smallest model: ADK parses every block and scores every rubric by its ID;
    v2 restates a property's first words only and keeps Evidence and Rationale within their bounds."""
    from google.adk.evaluation.eval_rubrics import Rubric, RubricContent
    from google.adk.evaluation.rubric_based_final_response_quality_v1 import (
        RubricBasedFinalResponseQualityV1Evaluator,
    )

    setenv(
        monkeypatch,
        WORKBOOK_JUDGE_FORMAT=judge_format,
        WORKBOOK_JUDGE_EVIDENCE_CHARS="30",
        WORKBOOK_JUDGE_RATIONALE_CHARS="40",
    )
    properties = {"scope": "The answer stays on the lore.", "short": "The answer is under fifty words long."}
    rubrics = [Rubric(rubric_id=i, rubric_content=RubricContent(text_property=t)) for i, t in properties.items()]
    metric = EvalMetric(
        metric_name="rubric_based_final_response_quality_v1",
        criterion=RubricsBasedCriterion(
            threshold=0.5, judge_model_options=JudgeModelOptions(judge_model=SMALL, num_samples=1), rubrics=rubrics
        ),
    )
    evaluator = RubricBasedFinalResponseQualityV1Evaluator(metric)
    with call_log() as calls:
        result = helpers.run_sync(
            evaluator.evaluate_invocations([_invocation("Who is Nico?", "Nico leads the bishops.")], None)
        )
    reply = calls[-1]
    assert reply["constrained"] == "grammar"
    assert ("judge_format" in reply["request"]) == (judge_format == "v2")
    # ADK's fixed rubric preamble (~2,600 tokens) is found in the prompt: the prefix a fresh process restores.
    assert len(judge_preamble(last_prompt(reply["request"]))) > 10_000
    parsed = DefaultAutoRaterResponseParser().parse(reply["text"])
    assert [r.rubric_id for r in parsed] == ["scope", "short"]
    shown = {
        "v1": list(properties.values()),
        "v2": ["The answer stays on the lore.", "The answer is under fifty words"],
    }
    assert [r.property_text for r in parsed] == shown[judge_format]
    assert all(r.score in (0.0, 1.0) for r in parsed)
    assert {s.rubric_id for s in result.per_invocation_results[0].rubric_scores} == set(properties)
    if judge_format == "v2":
        assert all(len(r.rationale) <= 40 for r in parsed)
        assert all(len(line) <= len("Evidence: ") + 30 for line in reply["text"].splitlines() if "Evidence:" in line)


def test_call_logs_nest_and_keep_nothing_outside_a_run(recordings):
    request = {"model": "local/scripted", "system": "", "contents": [{"role": "user", "text": "q"}], "config": {}}
    helpers.run_sync(cassettes().call(request, _scripted_live(["unlogged"])))
    with call_log() as outer:
        with call_log() as inner:
            helpers.run_sync(cassettes().call(request, _scripted_live(["both"])))
        helpers.run_sync(cassettes().call(request, _scripted_live(["outer only"])))
    assert [call["text"] for call in inner] == ["both"]
    assert [call["text"] for call in outer] == ["both", "outer only"]


def test_judge_prompts_are_recognised_in_one_place():
    """A prompt ADK's rubric judges send gets the rubric kind; only the final-response layout is constrained."""
    from google.adk.evaluation import rubric_based_final_response_quality_v1, rubric_based_tool_use_quality_v1

    def request(prompt):
        return {"model": SMALL, "system": "", "contents": [{"role": "user", "text": prompt}], "config": {}}

    final = rubric_based_final_response_quality_v1._RUBRIC_BASED_FINAL_RESPONSE_QUALITY_V1_PROMPT
    tool_use = rubric_based_tool_use_quality_v1._RUBRIC_BASED_TOOL_USE_QUALITY_V1_PROMPT
    assert judge_kind(request(final)) == judge_kind(request(tool_use)) == "rubric"
    assert "grammar" in judge_output_constraint(request(final))
    assert judge_output_constraint(request(tool_use)) == {}
    assert judge_kind(request("Who is Nico?")) == "other" and judge_output_constraint(request("hi")) == {}


def test_verdict_probabilities_judges_each_selected_answer_once(recordings):
    """Live on the smallest model: one temperature-0 call per distinct (case, answer) that `only` keeps,
    each row with a P(yes) in [0, 1]; an answer repeated in the input is judged once."""
    answers = pd.DataFrame(
        {
            "case": ["trench", "trench", "trench", "bishops"],
            "user": ["What colour is Trench?"] * 3 + ["How many bishops rule Dema?"],
            "answer": ["Trench is yellow.", "Trench is yellow.", "Trench is blue.", "Nine bishops."],
            "reference": ["Yellow."] * 3 + ["Nine."],
        }
    )
    only = pd.DataFrame({"case": ["trench", "trench"], "answer_digest": [text_digest("Trench is yellow."), "other"]})
    with call_log() as calls:
        scores = helpers.verdict_probabilities(answers, SMALL, run_id="p-yes-test", only=only)
    assert len(calls) == 1 and calls[0]["request"]["config"]["response_logprobs"] is True
    assert scores[["case", "answer_digest"]].values.tolist() == [["trench", text_digest("Trench is yellow.")]]
    assert 0.0 <= scores.p_yes.iloc[0] <= 1.0
