"""The race data behind the Pit Wall agent (notebook 06): a data-source protocol and the in-memory source
read from data/races/ (a handful of real 2024 results)."""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from workbook.inputs import note_read
from workbook.settings import DATA, WorkbookError

RACES = DATA / "races" / "f1_2024.yaml"


class RaceDataError(WorkbookError):
    """A question the data cannot answer (no such race or season): the model can recover by asking again."""


class Classified(BaseModel):
    """One driver's line in a classification: a race result or a championship standing."""

    position: int
    driver: str
    team: str
    points: int


class RaceSummary(BaseModel):
    """One Grand Prix's classification: which race, and the top five."""

    season: int
    round: int
    grand_prix: str
    circuit: str
    laps: int
    results: list[Classified]


class Race(RaceSummary):
    """One Grand Prix as the archive keeps it: the classification and who set the fastest lap."""

    fastest_lap_driver: str
    fastest_lap_time: str | None = None
    fastest_lap_number: int | None = None


class RaceDataSource(Protocol):
    """What the race tools need from a data source (an in-memory file here; an HTTP API in the write-up)."""

    def race(self, season: int, grand_prix: str) -> Race: ...

    def final_standings(self, season: int) -> tuple[Classified, ...]: ...


class InMemoryRaceData:
    """Race data read once from a YAML file such as data/races/f1_2024.yaml."""

    def __init__(self, path: Path = RACES):
        import yaml

        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        note_read(path)  # a report job reruns when the race data changes
        self.season = int(data["season"])
        self._races = {_key(race["grand_prix"]): _race(self.season, race) for race in data["races"]}
        self._standings = tuple(_line(line) for line in data["final_standings"])

    def race(self, season: int, grand_prix: str) -> Race:
        """Return one race, found by season and Grand Prix name (accents, case and 'Grand Prix' ignored)."""
        self._check_season(season)
        found = self._races.get(_key(grand_prix))
        if found is None:
            known = ", ".join(race.grand_prix for race in self._races.values())
            raise RaceDataError(f"no {season} race called {grand_prix!r}; the archive has: {known}")
        return found

    def final_standings(self, season: int) -> tuple[Classified, ...]:
        """Return the drivers' championship after the season's final round."""
        self._check_season(season)
        return self._standings

    def _check_season(self, season: int) -> None:
        if season != self.season:
            raise RaceDataError(f"the archive holds the {self.season} season only, not {season}")


def _race(season: int, race: dict) -> Race:
    fastest = race["fastest_lap"]
    return Race(
        season=season,
        round=race["round"],
        grand_prix=race["grand_prix"],
        circuit=race["circuit"],
        laps=race["laps"],
        results=[_line(line) for line in race["results"]],
        fastest_lap_driver=fastest["driver"],
        fastest_lap_time=fastest.get("time"),
        fastest_lap_number=fastest.get("lap"),
    )


def _line(line: list) -> Classified:
    position, driver, team, points = line
    return Classified(position=position, driver=driver, team=team, points=points)


def _key(name: str) -> str:
    # Models write "São Paulo Grand Prix", "sao paulo" or "Sao Paulo GP": all name the same race.
    plain = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower()
    for suffix in ("grand prix", " gp"):
        plain = plain.removesuffix(suffix)
    return " ".join(plain.replace("-", " ").split())
