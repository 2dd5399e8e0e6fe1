"""Run scopes: identical model requests replay in order within one run, and a run's failures are kept.

A run (`run_eval`, `judge_answers`, `judge_panel`, `run_battery`, `chat`, `ask_each`) opens a scope,
or a notebook opens one explicitly with `replay_scope("name")`. Inside a scope the n-th identical
request replays the n-th recording counted from the scope's start, so re-running a cell gives the
same table and two runs never consume each other's recordings. Scopes do not nest: a run inside an
open scope joins it (the outermost scope wins), which is how a notebook asks for several runs to
count together. Calls outside any scope count per process, as a fresh process would.

The model layer also notes every failed call in the open scope, because ADK's eval service catches
model errors and turns them into dropped or NOT_EVALUATED cases (see `workbook.failures`).
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections import defaultdict
from dataclasses import dataclass, field

from workbook.util import first_line


@dataclass
class RunScope:
    """One run's occurrence counters (per request digest) and the failures noted while it was open.

    A context manager: `with scope:` makes it the open scope (joining one already open). The same
    scope may be entered again later, in another cell, and keeps counting where it left off.
    """

    name: str
    occurrences: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    failures: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    tokens: list = field(default_factory=list, repr=False)

    def next_occurrence(self, digest: str) -> int:
        """Return how many identical requests this scope saw before this one (and count this one)."""
        with self.lock:
            occurrence = self.occurrences[digest]
            self.occurrences[digest] += 1
        return occurrence

    def note_failure(self, failure: dict) -> None:
        """Keep one failure (phase, case, repeat, metric, model, kind, cause) for the run to report."""
        with self.lock:
            self.failures.append(failure)

    def __enter__(self) -> RunScope:
        opened = _scope.get()
        self.tokens.append(None if opened is not None else _scope.set(self))
        return opened or self

    def __exit__(self, *exc_info) -> None:
        token = self.tokens.pop()
        if token is not None:
            _scope.reset(token)


_scope: contextvars.ContextVar[RunScope | None] = contextvars.ContextVar("replay_scope", default=None)


def replay_scope(name: str = "scope") -> RunScope:
    """Return a new run scope: `with helpers.replay_scope("name"):` counts identical requests from zero.

    Inside an already open scope, `with` joins that one (the outermost scope wins). Tasks and
    run_sync workers started inside the block share it. Keep the returned scope and enter it in
    several cells to make their runs count together, as one process did before run scopes.
    """
    return RunScope(name)


def current_scope() -> RunScope | None:
    """Return the run scope open around the caller, or None outside any scope."""
    return _scope.get()


class ScopeLogHandler(logging.Handler):
    """Keeps, in the open run scope, every exception ADK logs and then swallows (e.g. a metric that raised)."""

    def __init__(self, tags: contextvars.ContextVar[dict | None]):
        super().__init__(logging.WARNING)
        self.tags = tags

    def emit(self, record: logging.LogRecord) -> None:
        scope = _scope.get()
        error = record.exc_info[1] if record.exc_info else None
        if scope is None or error is None:
            return
        cause = f"{type(error).__name__}: {first_line(error)}"
        scope.note_failure({**(self.tags.get() or {}), "kind": "adk", "cause": cause})
