"""The report grid file (data/report_grid.yaml): validated whole before any job runs, then expanded into
notebook jobs.

Every problem is collected and reported at once, each with the file, the line and the key:
YAML syntax, an empty file, unknown keys, a scalar where a list is expected, a notebook that is not
in notebooks/, a parameter the notebook does not have, a parameter that looks like a secret.
"""

from __future__ import annotations

import difflib
import itertools
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from workbook.settings import DATA, REPO, GridFileError

NOTEBOOKS = REPO / "notebooks"
DEFAULT_GRID = DATA / "report_grid.yaml"
TOP_KEYS = {"teaching_notebooks": "a list of notebooks", "grid": "a mapping", "report": "a notebook name"}
GRID_KEYS = {"notebook": "a notebook name", "fixed": "a mapping of parameters", "vary": "a mapping of lists"}
_SECRET_NAMES = re.compile(r"key|token|secret|password|credential", re.I)


@dataclass(frozen=True)
class NotebookJob:
    """One papermill execution: a notebook, its parameters, and where its output goes."""

    notebook: str
    parameters: dict
    name: str  # output stem under outputs/notebooks/
    after_others: bool = False  # the report notebook: it reads the run tables of every other job


def grid_jobs(grid_file: str | Path = DEFAULT_GRID) -> list[NotebookJob]:
    """Return the notebook runs that `make report` executes, in order, from the grid YAML (validated first:
    a malformed file raises GridFileError listing every problem with its line)."""
    path = Path(grid_file)
    spec = read_grid_file(path)
    jobs = [NotebookJob(name, {}, Path(name).stem) for name in spec.get("teaching_notebooks", [])]
    grid = spec.get("grid")
    if grid:
        keys = list(grid["vary"])
        for values in itertools.product(*(grid["vary"][key] for key in keys)):
            parameters = {**(grid.get("fixed") or {}), **dict(zip(keys, values, strict=True))}
            slug = "__".join(f"{key}={_slug(value)}" for key, value in zip(keys, values, strict=True))
            parameters["run_id"] = f"grid__{slug}"
            jobs.append(NotebookJob(grid["notebook"], parameters, f"{Path(grid['notebook']).stem}__{slug}"))
    if spec.get("report"):
        jobs.append(NotebookJob(spec["report"], {}, Path(spec["report"]).stem, after_others=True))
    return jobs


def read_grid_file(path: Path) -> dict:
    """Return the grid file's content, checked against the grid's schema; raise GridFileError naming
    every problem (file, line, key, what was expected, what to do)."""
    import yaml

    if not path.is_file():
        raise GridFileError(f"{path}: no such grid file; `make report` reads {DEFAULT_GRID.relative_to(REPO)}")
    text = path.read_text(encoding="utf-8")
    try:
        spec, root = yaml.safe_load(text), yaml.compose(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise GridFileError(f"{path}{where}: not valid YAML ({problem}); fix the indentation or quoting") from None
    if spec is None:
        raise GridFileError(
            f"{path} is empty: list teaching_notebooks, a grid (notebook, fixed, vary) and/or a report "
            f"notebook; see {DEFAULT_GRID.relative_to(REPO)}"
        )
    problems = sorted(_problems(spec, lambda *keys: _line(root, keys)), key=lambda p: int(p.split()[1].rstrip(":")))
    if problems:
        raise GridFileError(f"{path} has {len(problems)} problem(s):\n" + "\n".join(f"  {p}" for p in problems))
    return spec


def _problems(spec: Any, line) -> list[str]:
    if not isinstance(spec, dict):
        return [f"line 1: expected a mapping with keys {', '.join(TOP_KEYS)}, found {type(spec).__name__}"]
    problems = _unknown_keys(spec, TOP_KEYS, (), line)
    notebooks = spec.get("teaching_notebooks", [])
    if not isinstance(notebooks, list):
        problems.append(f"line {line('teaching_notebooks')}: teaching_notebooks: expected a list, e.g. [{notebooks}]")
        notebooks = []
    for index, name in enumerate(notebooks):
        problems += _notebook_problems(name, f"teaching_notebooks[{index}]", line("teaching_notebooks"))
    if "report" in spec:
        problems += _notebook_problems(spec["report"], "report", line("report"))
    if "grid" in spec:
        problems += _grid_problems(spec["grid"], line)
    return problems


def _grid_problems(grid: Any, line) -> list[str]:
    if not isinstance(grid, dict):
        return [f"line {line('grid')}: grid: expected a mapping with notebook, fixed and vary"]
    problems = _unknown_keys(grid, GRID_KEYS, ("grid",), line)
    if "notebook" not in grid or "vary" not in grid:
        problems.append(f"line {line('grid')}: grid: needs both notebook and vary (fixed is optional)")
    problems += _notebook_problems(grid.get("notebook"), "grid.notebook", line("grid", "notebook"))
    fixed, vary = grid.get("fixed") or {}, grid.get("vary") or {}
    for key, value in (("fixed", fixed), ("vary", vary)):
        if not isinstance(value, dict):
            problems.append(f"line {line('grid', key)}: grid.{key}: expected a mapping of parameter: value")
    if not isinstance(vary, dict) or not isinstance(fixed, dict):
        return problems
    for name, values in vary.items():
        if not isinstance(values, list) or not values:
            problems.append(
                f"line {line('grid', 'vary', name)}: grid.vary.{name}: expected a non-empty list of values, "
                f"found {values!r}; write [{values}] (or move it to grid.fixed)"
            )
    return problems + _parameter_problems(grid.get("notebook"), fixed, vary, line)


def _parameter_problems(notebook: Any, fixed: dict, vary: dict, line) -> list[str]:
    problems, known = [], _notebook_parameters(notebook)
    for name in [*fixed, *vary]:
        where = f"line {line('grid', 'vary' if name in vary else 'fixed', name)}: grid parameter {name}"
        if _SECRET_NAMES.search(str(name)):
            problems.append(f"{where} looks like a secret; put secrets in .env, never in the grid")
        elif known is not None and name not in known:
            problems.append(f"{where}: {notebook} has no such parameter{_suggest(name, known)}")
    return problems


def _unknown_keys(mapping: dict, allowed: dict, prefix: tuple, line) -> list[str]:
    problems = []
    for key in mapping:
        if key not in allowed:
            name = ".".join((*prefix, str(key)))
            expected = ", ".join(f"{k} ({v})" for k, v in allowed.items())
            problems.append(
                f"line {line(*prefix, key)}: unknown key {name}{_suggest(key, allowed)}; expected {expected}"
            )
    return problems


def _notebook_problems(name: Any, key: str, line: int) -> list[str]:
    if not isinstance(name, str) or not name.endswith(".ipynb"):
        return [f"line {line}: {key}: expected a notebook file name such as batch_eval_run.ipynb, found {name!r}"]
    if not (NOTEBOOKS / name).is_file():
        known = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
        return [f"line {line}: {key}: {name} is not in notebooks/{_suggest(name, known)} (it has {', '.join(known)})"]
    return []


def _notebook_parameters(name: Any) -> set[str] | None:
    """The names in a notebook's parameters cell, or None when the notebook cannot be inspected."""
    if not isinstance(name, str) or not (NOTEBOOKS / name).is_file():
        return None
    return set(import_papermill().inspect_notebook(str(NOTEBOOKS / name)))


def import_papermill() -> ModuleType:
    """Return papermill, imported (once) without rfc3987_syntax.

    nbformat's jsonschema imports rfc3987_syntax when it is installed (JupyterLab's jupyter-events brings
    it) only to check the "iri" string format, which no notebook schema uses, and that import builds a
    grammar: ~3 s of CPU in every process that reads a grid or runs its jobs (the report's, each Dask worker).
    """
    sys.modules.setdefault("rfc3987_syntax", None)  # None: jsonschema's optional import fails and is skipped
    import papermill

    return papermill


def _line(root: Any, keys: tuple) -> int:
    """The 1-based line of a key path in the composed YAML (of its nearest existing parent if absent)."""
    import yaml

    node, found = root, 1
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            break
        match = [(k, v) for k, v in node.value if getattr(k, "value", None) == str(key)]
        if not match:
            break
        key_node, node = match[0]
        found = key_node.start_mark.line + 1
    return found


def _suggest(name: Any, known) -> str:
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", str(value).removeprefix("local/")).strip("-")
