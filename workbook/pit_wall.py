"""The Pit Wall agent (notebook 06): race-data tools in two contract versions, the tool-error callback,
and the ADK agent that uses them.

The two contracts differ only in what `get_race_results` says about points: the gap version returns
26 points for a win without saying where the 26th came from; the closed version adds the fastest lap
and states the rule in its docstring (which the model and the hallucination judge both read).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

if TYPE_CHECKING:
    import pandas as pd
    from google.adk.agents import LlmAgent
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext

from google.genai import types
from pydantic import BaseModel, Field

import workbook.models  # noqa: F401  (registers the local/... and recorded gemini-* model classes)
from workbook.agent import read_prompt
from workbook.race_data import Classified, InMemoryRaceData, RaceDataError, RaceDataSource, RaceSummary
from workbook.settings import DATA, settings

INSTRUCTION = DATA / "prompts" / "pit_wall.md"
Contract = Literal["gap", "closed"]

# Parameter descriptions live in Annotated/Field: ADK copies them into the declaration's schema
# (a docstring's Args: section would not reach the model).
Season = Annotated[int, Field(description="Championship year, for example 2024.", ge=1950)]
GrandPrix = Annotated[
    str, Field(description="Grand Prix name without 'Grand Prix', for example 'Sao Paulo', 'Bahrain' or 'Abu Dhabi'.")
]


class RaceResults(RaceSummary):
    """What get_race_results returns under the gap contract: the classification, nothing more."""


class FastestLap(BaseModel):
    """Who set a race's fastest lap (lap and time only where the archive has them)."""

    driver: str
    lap: int | None = None
    time: str | None = None


class RaceResultsWithFastestLap(RaceResults):
    """What get_race_results returns under the closed contract: the results plus the fastest lap."""

    fastest_lap: FastestLap = Field(description="The driver who set the race's fastest lap.")


class Standings(BaseModel):
    """What get_driver_standings returns."""

    season: int
    after: str
    standings: list[Classified]


class RaceTools:
    """The race-data tools with the gap contract; bound methods, so ADK sees only their own arguments."""

    def __init__(self, source: RaceDataSource):
        self._source = source

    def get_race_results(self, season: Season, grand_prix: GrandPrix) -> RaceResults:
        """Return the official classification of one Grand Prix: position, driver, team and points of the
        top five. Use it for who won a race, who finished where, or how many points a driver scored."""
        race = self._source.race(season, grand_prix)
        return RaceResults(**race.model_dump(include=set(RaceResults.model_fields)))

    def get_driver_standings(self, season: Season) -> Standings:
        """Return the drivers' championship after the season's final round: position, driver, team and
        points. Use it for who won the championship or how far apart two drivers finished."""
        return Standings(season=season, after="final round", standings=list(self._source.final_standings(season)))


class ClosedRaceTools(RaceTools):
    """The same tools with the closed contract: race results say where every point came from."""

    def get_race_results(self, season: Season, grand_prix: GrandPrix) -> RaceResultsWithFastestLap:
        """Return the official classification of one Grand Prix: position, driver, team and points of the
        top five, and the race's fastest lap. Use it for who won a race, who finished where, or how many
        points a driver scored. Points: 25, 18, 15, 12, 10, 8, 6, 4, 2, 1 for positions 1 to 10;
        fastest_lap names the driver with the race's fastest lap, and from 2019 to 2024 that driver
        scored one extra point when finishing in the top 10 (so a win with the fastest lap is 26).
        fastest_lap.lap and fastest_lap.time are null when the archive has no timing."""
        race = self._source.race(season, grand_prix)
        fastest = FastestLap(driver=race.fastest_lap_driver, lap=race.fastest_lap_number, time=race.fastest_lap_time)
        base = super().get_race_results(season, grand_prix)
        return RaceResultsWithFastestLap(**base.model_dump(), fastest_lap=fastest)


CONTRACTS: dict[str, type[RaceTools]] = {"gap": RaceTools, "closed": ClosedRaceTools}
RECOVERABLE_ERRORS = (RaceDataError,)  # what the model can fix by asking again; anything else is a bug


def report_tool_error(tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, error: Exception) -> dict | None:
    """Return a recoverable tool error as the function response the model sees, or None to let ADK raise it."""
    if not isinstance(error, RECOVERABLE_ERRORS):
        return None
    return {"error": f"{type(error).__name__}: {error}"}


def build_pit_wall(
    contract: Contract = "closed",
    model: str | None = None,
    source: RaceDataSource | None = None,
    recover_tool_errors: bool = True,
    temperature: float = 0.2,
    max_output_tokens: int = 200,
) -> LlmAgent:
    """Return the Pit Wall agent: an ADK LlmAgent whose race tools follow the `contract` version.

    `recover_tool_errors=False` leaves out on_tool_error_callback (to see what ADK does without it).
    """
    from google.adk.agents import LlmAgent

    tools = CONTRACTS[contract](source or InMemoryRaceData())
    return LlmAgent(
        name="pit_wall",
        model=model or settings().default_model,
        description=f"Answers Formula 1 results questions from race-data tools ({contract} contract)",
        instruction=read_prompt(INSTRUCTION).instruction,
        tools=[tools.get_race_results, tools.get_driver_standings],
        generate_content_config=types.GenerateContentConfig(
            temperature=temperature, max_output_tokens=max_output_tokens
        ),
        on_tool_error_callback=report_tool_error if recover_tool_errors else None,
    )


def tool_declarations(agent: LlmAgent) -> pd.DataFrame:
    """Return what the model is told about each of an agent's tools, as ADK declares them: name,
    description (the docstring) and each parameter with its type and description."""
    import pandas as pd
    from google.adk.tools.function_tool import FunctionTool

    rows = []
    for tool in agent.tools:
        declaration = FunctionTool(tool)._get_declaration()
        schema = declaration.parameters_json_schema or {}
        parameters = [
            f"{name} ({spec.get('type')}): {spec.get('description', '(no description)')}"
            for name, spec in schema.get("properties", {}).items()
        ]
        rows.append(
            {"tool": declaration.name, "description": declaration.description, "parameters": "\n".join(parameters)}
        )
    return pd.DataFrame(rows)


def response_schema_by_backend(tool: Any) -> pd.DataFrame:
    """Return, per ADK backend variant (Gemini API, Vertex AI), whether the declaration ADK builds for a
    typed tool carries the return type's response schema, and the fields it would describe."""
    import pandas as pd
    from google.adk.tools._automatic_function_calling_util import build_function_declaration
    from google.adk.utils.variant_utils import GoogleLLMVariant

    rows = []
    for variant in GoogleLLMVariant:
        schema = build_function_declaration(tool, variant=variant).response_json_schema
        fields = sorted((schema or {}).get("properties", {}))
        rows.append({"backend": variant.name, "response_schema_sent": schema is not None, "fields": ", ".join(fields)})
    return pd.DataFrame(rows)


def tool_error_outcomes(question: str, contract: Contract = "closed", model: str | None = None) -> pd.DataFrame:
    """Return what happens when the model calls a tool that raises a recoverable error, with and without
    on_tool_error_callback: one row each with the tools the model called and the run's outcome (the
    answer, or the exception that ended the run)."""
    import pandas as pd

    from workbook.agent import chat
    from workbook.cassettes import call_log

    rows = []
    for recover in (False, True):
        agent = build_pit_wall(contract, model=model, recover_tool_errors=recover)
        with call_log() as calls:
            try:
                outcome = "answered: " + chat(agent, question, conversation_id=f"tool-error-{recover}").loc[0, "answer"]
            except RaceDataError as error:
                outcome = f"run ended: {type(error).__name__}: {error}"
        called = [c["name"] for call in calls for c in call.get("tool_calls", [])]
        rows.append(
            {
                "on_tool_error_callback": "report_tool_error" if recover else "none",
                "tools_called": ", ".join(called),
                "outcome": outcome,
            }
        )
    return pd.DataFrame(rows)
