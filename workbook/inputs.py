"""What a report job read: every data file and recording is noted as it is read, so the report grid can
tell on its next run whether any of them changed.

The loaders note their files here (`data_file`, `load_prompt`, `prompt_versions`, `read_labels`,
`read_runs`; the cassette store notes each recording it replays or makes). With WORKBOOK_READ_LOG set
(the grid sets it for each papermill kernel) each new note is appended to that file as a JSON line;
`input_record` turns the log into digests for the job's .done.json, `changed_inputs` compares them
with the files as they are now.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import defaultdict
from pathlib import Path

from workbook.settings import REPO
from workbook.util import atomic_write, shown_path

READ_LOG_VARIABLE = "WORKBOOK_READ_LOG"
OUTPUTS_MARK = "<outputs>"  # a portable read log's name for the job's outputs folder
_noted: set[tuple[str, str]] = set()  # (read log, note) already written by this process
_lock = threading.Lock()


def note_read(path: str | Path) -> None:
    """Note that this process read a data file (or listed a folder); nothing is returned."""
    _note({"file": str(Path(path).resolve())})


def note_recording(cassette: str | Path, digest: str, occurrence: int) -> None:
    """Note that this process used one recording of a cassette (replayed or just recorded)."""
    _note({"recording": str(Path(cassette).resolve()), "key": [digest, occurrence]})


def input_record(read_log: Path) -> dict:
    """Return what a read log says the job read, with digests: {"files": {path: digest},
    "recordings": {cassette: {"keys": [[digest, occurrence], ...], "digest": ...}}}."""
    files: set[str] = set()
    keys: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for note in _notes(read_log):
        if "file" in note:  # a relative path is the repository's (a log made on another machine)
            files.add(shown_path(REPO / note["file"]))
        else:
            keys[shown_path(REPO / note["recording"])].add(tuple(note["key"]))
    recordings = {}
    for cassette, used in sorted(keys.items()):
        ordered = sorted(used)
        recordings[cassette] = {"keys": [list(key) for key in ordered], "digest": _recordings_digest(cassette, ordered)}
    return {"files": {path: _path_digest(path) for path in sorted(files)}, "recordings": recordings}


def portable_read_log(read_log: Path, outputs: Path) -> str:
    """Return a read log that another checkout of the same commit can take as its own (a Dask worker's,
    for the client; see `local_read_log`): the repository's paths relative, those under the job's
    `outputs` folder (a file a notebook wrote, then read) marked as such."""
    notes = []
    for note in _notes(read_log):
        field = "file" if "file" in note else "recording"
        path = Path(note[field]).resolve()
        inside = path.is_relative_to(outputs.resolve())
        note[field] = f"{OUTPUTS_MARK}/{path.relative_to(outputs.resolve())}" if inside else shown_path(path)
        notes.append(json.dumps(note, sort_keys=True) + "\n")
    return "".join(notes)


def local_read_log(portable: str, read_log: Path, outputs: Path) -> None:
    """Write a portable read log (see `portable_read_log`) to `read_log`, its outputs paths under `outputs`."""
    lines = []
    for note in map(json.loads, portable.splitlines()):
        field = "file" if "file" in note else "recording"
        if note[field].startswith(OUTPUTS_MARK + "/"):
            note[field] = str(outputs.resolve() / note[field].removeprefix(OUTPUTS_MARK + "/"))
        lines.append(json.dumps(note, sort_keys=True) + "\n")
    atomic_write(read_log, "".join(lines))


def _notes(read_log: Path) -> list[dict]:
    notes = []
    for line in read_log.read_text(encoding="utf-8").splitlines() if read_log.exists() else []:
        try:
            notes.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a killed kernel; the job reruns anyway
    return notes


def changed_inputs(record: dict) -> list[str]:
    """Return the inputs in a job's input record that differ now (file paths as recorded), [] if none."""
    changed = [path for path, digest in record.get("files", {}).items() if _path_digest(path) != digest]
    for cassette, used in record.get("recordings", {}).items():
        keys = [tuple(key) for key in used["keys"]]
        if _recordings_digest(cassette, keys) != used["digest"]:
            changed.append(f"{cassette} ({len(keys)} recordings used)")
    return changed


def _note(note: dict) -> None:
    target = os.environ.get(READ_LOG_VARIABLE, "")
    line = json.dumps(note, sort_keys=True)
    with _lock:
        if not target or (target, line) in _noted:
            return
        _noted.add((target, line))
        with open(target, "a", encoding="utf-8") as log:
            log.write(line + "\n")


def _path_digest(shown: str) -> str:
    path = REPO / shown
    if path.is_dir():
        names = "\n".join(sorted(child.name for child in path.iterdir()))
        return "folder:" + hashlib.sha256(names.encode()).hexdigest()[:16]
    if not path.is_file():
        return "missing"
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


_cassette_cache: dict[Path, tuple[tuple[int, int], dict]] = {}


def _recordings_digest(shown: str, keys: list[tuple[str, int]]) -> str:
    """A digest of the cassette lines recorded for these keys: another recording under a key changes it,
    recordings added for other requests do not."""
    lines = _cassette_lines(REPO / shown)
    digest = hashlib.sha256()
    for key in keys:
        digest.update((lines.get(tuple(key), "missing") + "\n").encode())
    return digest.hexdigest()[:16]


def _cassette_lines(path: Path) -> dict[tuple[str, int], str]:
    if not path.is_file():
        return {}
    stat = path.stat()
    version = (stat.st_size, stat.st_mtime_ns)
    cached = _cassette_cache.get(path)
    if cached is None or cached[0] != version:
        lines = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
                lines[(entry["digest"], entry["occurrence"])] = line  # the last recording of a key replays
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
        cached = (version, lines)
        _cassette_cache[path] = cached
    return cached[1]
