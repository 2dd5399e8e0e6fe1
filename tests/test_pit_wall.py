"""The Pit Wall agent and tool calling: tools over an in-memory source, declarations, the request key,
the llama.cpp message conversion, and ADK's runner with a scripted model (plumbing, not a model) or the
Gemini stub."""

import json

import pytest
import scripted
from conftest import setenv
from gemini_stub import GeminiStub
from google.adk.models.llm_request import LlmRequest
from google.adk.tools.function_tool import FunctionTool
from google.genai import types

import helpers
from workbook.cassettes import call_log, normalize_request, request_digest
from workbook.llama import chat_messages, reply_message
from workbook.pit_wall import ClosedRaceTools, RaceTools, build_pit_wall
from workbook.race_data import InMemoryRaceData, RaceDataError

SOURCE = InMemoryRaceData()


def test_gap_contract_returns_26_points_without_saying_why_and_closed_contract_says_it():
    gap = RaceTools(SOURCE).get_race_results(2024, "Sao Paulo")
    closed = ClosedRaceTools(SOURCE).get_race_results(2024, "Sao Paulo")
    assert (gap.results[0].driver, gap.results[0].points) == ("Max Verstappen", 26)
    assert "fastest" not in gap.model_dump_json().lower()
    assert closed.fastest_lap.model_dump() == {"driver": "Max Verstappen", "lap": 67, "time": "1:20.472"}
    assert closed.results == gap.results
    assert "one extra point" in ClosedRaceTools.get_race_results.__doc__
    assert "extra point" not in RaceTools.get_race_results.__doc__


def test_race_names_are_found_however_the_model_writes_them_and_unknown_ones_list_the_archive():
    for name in ("São Paulo Grand Prix", "sao paulo", "Sao Paulo GP", "SAO-PAULO"):
        assert SOURCE.race(2024, name).circuit == "Interlagos"
    with pytest.raises(RaceDataError, match="Monaco.*Bahrain, Sao Paulo, Abu Dhabi"):
        SOURCE.race(2024, "Monaco")
    with pytest.raises(RaceDataError, match="2024 season only"):
        SOURCE.final_standings(2019)


def test_declarations_carry_parameter_descriptions_and_no_self():
    declaration = FunctionTool(RaceTools(SOURCE).get_race_results)._get_declaration()
    schema = declaration.parameters_json_schema
    assert declaration.name == "get_race_results"
    assert set(schema["properties"]) == {"season", "grand_prix"}
    assert "Championship year" in schema["properties"]["season"]["description"]
    assert "'Sao Paulo'" in schema["properties"]["grand_prix"]["description"]


def _tool_request(call_id: str) -> LlmRequest:
    call = types.Part(function_call=types.FunctionCall(id=call_id, name="get_race_results", args={"season": 2024}))
    result = types.Part(
        function_response=types.FunctionResponse(id=call_id, name="get_race_results", response={"points": 26})
    )
    agent = build_pit_wall("gap", model="scripted/agent")
    declarations = [FunctionTool(t)._get_declaration() for t in agent.tools]
    return LlmRequest(
        contents=[
            types.Content(role="user", parts=[types.Part(text="Who won?")]),
            types.Content(role="model", parts=[call]),
            types.Content(role="user", parts=[result]),
        ],
        config=types.GenerateContentConfig(tools=[types.Tool(function_declarations=declarations)]),
    )


def test_request_key_adds_tools_and_calls_only_when_present_and_ignores_call_ids():
    text_only = LlmRequest(contents=[types.Content(role="user", parts=[types.Part(text="Who won?")])])
    assert set(normalize_request("m", text_only)) == {"model", "system", "contents", "config"}
    assert normalize_request("m", text_only)["contents"] == [{"role": "user", "text": "Who won?"}]
    first, second = normalize_request("m", _tool_request("adk-1")), normalize_request("m", _tool_request("adk-2"))
    assert request_digest(first) == request_digest(second)  # ADK draws new call ids every run
    assert [d["name"] for d in first["tools"]] == ["get_race_results", "get_driver_standings"]
    assert first["contents"][1]["tool_calls"] == [{"name": "get_race_results", "args": {"season": 2024}}]
    assert first["contents"][2]["tool_responses"] == [{"name": "get_race_results", "response": {"points": 26}}]


def test_tool_turns_become_chat_messages_that_answer_their_calls():
    request = normalize_request("m", _tool_request("adk-1"))
    messages = chat_messages(request["contents"])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    call = messages[1]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"season": 2024}
    assert messages[2]["tool_call_id"] == call["id"] and json.loads(messages[2]["content"]) == {"points": 26}


def test_a_fenced_json_call_to_a_declared_tool_is_a_call_and_anything_else_is_text():
    request = {"tools": [{"name": "get_race_results"}]}
    fenced = '```json\n{"name": "get_race_results", "arguments": {"season": 2024}}\n```'
    assert reply_message({"content": fenced}, request) == {
        "text": "",
        "tool_calls": [{"name": "get_race_results", "args": {"season": 2024}}],
        "raw_text": fenced,
    }
    unknown = '{"name": "get_race_resultsParams", "arguments": {"season": 2024}}'
    assert reply_message({"content": unknown}, request) == {"text": unknown}
    assert reply_message({"content": fenced}, {}) == {"text": fenced}  # no tools declared: just text


def _script_missing_race_then_answer():
    scripted.SCRIPTS["scripted/agent"] = [
        {"tool_calls": [{"name": "get_race_results", "args": {"season": 2024, "grand_prix": "Monaco"}}]},
        "The archive has no 2024 Monaco race.",
    ]


def test_a_recoverable_tool_error_reaches_the_model_as_a_function_response(recordings):
    _script_missing_race_then_answer()
    with call_log() as calls:
        table = helpers.chat(build_pit_wall("gap", model="scripted/agent"), "Who won in Monaco?")
    assert table.loc[0, "answer"] == "The archive has no 2024 Monaco race."
    response = calls[1]["request"]["contents"][-1]["tool_responses"][0]
    assert response["name"] == "get_race_results" and response["response"]["error"].startswith("RaceDataError: ")


def test_without_the_callback_a_tool_error_ends_the_run(recordings):
    _script_missing_race_then_answer()
    with pytest.raises(RaceDataError):
        helpers.chat(build_pit_wall("gap", model="scripted/agent", recover_tool_errors=False), "Who won in Monaco?")


class _BrokenSource:
    def race(self, season, grand_prix):
        raise KeyError("results")  # a bug in the source, not a question the model can fix

    def final_standings(self, season):
        return ()


def test_a_bug_in_a_tool_still_raises_with_the_callback(recordings):
    _script_missing_race_then_answer()
    with pytest.raises(KeyError):
        helpers.chat(build_pit_wall("gap", model="scripted/agent", source=_BrokenSource()), "Who won in Monaco?")


def test_gemini_path_runs_a_tool_and_sends_no_response_schema(recordings, monkeypatch):
    """The Gemini API path through google-genai to a loopback stub: the stub asks for a tool, then answers.
    The typed return (a pydantic model) gives no response schema in the declaration the stub receives."""

    def reply(number: int, body: dict):
        if number == 0:
            return {"functionCall": {"name": "get_race_results", "args": {"season": 2024, "grand_prix": "Bahrain"}}}
        return "Verstappen won with 26 points."

    stub = GeminiStub(reply_for=reply)
    setenv(monkeypatch, GOOGLE_API_KEY="AIzaTEST-secret-key-1234567890", GEMINI_BASE_URL=stub.url)
    try:
        table = helpers.chat(build_pit_wall("closed", model="gemini-2.5-flash"), "Who won in Bahrain?")
    finally:
        stub.close()
    assert table.loc[0, "answer"] == "Verstappen won with 26 points."
    declaration = stub.requests[0]["body"]["tools"][0]["functionDeclarations"][0]
    assert set(declaration) == {"name", "description", "parameters_json_schema"}  # no response schema
    answered = stub.requests[1]["body"]["contents"][-1]["parts"][0]["functionResponse"]
    assert answered["response"]["result"]["fastest_lap"]["driver"] == "Max Verstappen"


def test_adk_call_ids_copied_into_a_judge_prompt_key_the_same_every_run():
    def judge_request(call_id: str) -> LlmRequest:
        text = f'tool_calls: [{{"id": "{call_id}", "name": "get_race_results"}}]'
        return LlmRequest(contents=[types.Content(role="user", parts=[types.Part(text=text)])])

    first = normalize_request("m", judge_request("adk-0b6f1d2e-1c3a-4d5e-8f90-123456789abc"))
    second = normalize_request("m", judge_request("adk-9a8b7c6d-5e4f-4a3b-9c2d-fedcba987654"))
    assert request_digest(first) == request_digest(second)
    assert '"id": "adk-call-1"' in first["contents"][0]["text"]
