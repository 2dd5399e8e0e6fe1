"""Small utilities every chapter uses: text of ADK content, hashing, durable writes, run_sync, progress."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from pandas.io.formats.style import Styler
    from tqdm.auto import tqdm

import asyncio
import contextvars
import hashlib
import os
import tempfile
import threading
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from google.genai import types


def text_of(content: Any) -> str:
    """Return the visible text of ADK/genai content (thoughts left out), a list of them, or a string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, types.Content):
        return "".join(part.text or "" for part in content.parts or [] if not part.thought)
    if isinstance(content, list):
        return "\n".join(text_of(item) for item in content)
    if isinstance(content, types.Part):
        return content.text or ""
    return str(content)


def text_digest(text: str) -> str:
    """Return a short sha256 of a text: how an answer is identified in labels."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def file_digest(path: Path) -> str:
    """Return a short sha256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def atomic_write(path: Path, text: str | bytes) -> None:
    """Write a text (or binary) file whole or not at all (a partial file is renamed into place)."""
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    partial = Path(name)  # unique: threads and processes writing the same file never share it
    os.fchmod(handle, 0o644)  # mkstemp's 0600 would make outputs private
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(text if isinstance(text, bytes) else text.encode())
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def append_line(path: Path, line: str) -> None:
    """Append one newline-terminated line durably (hold the file's lock around it).

    If a killed writer left a partial last line, the new line starts on a fresh one, so a crash
    costs at most the line that was being written.
    """
    with open(path, "a+b") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() and not _ends_with_newline(handle):
            handle.write(b"\n")
        handle.write(line.encode())
        handle.flush()
        os.fsync(handle.fileno())


def _ends_with_newline(handle) -> bool:
    handle.seek(-1, os.SEEK_END)
    last = handle.read(1)
    handle.seek(0, os.SEEK_END)
    return last == b"\n"


def first_line(error: object) -> str:
    """Return the first line of an error's message (its type name when it has none)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def now() -> str:
    """Return the current UTC time in ISO format, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def timestamp() -> str:
    """Return the current UTC time as a compact stamp for ids (20250101-120000)."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


def run_sync(coroutine: Awaitable) -> Any:
    """Return the result of a coroutine run to completion from plain code or from a notebook cell.

    Jupyter already runs an event loop in the kernel's thread, so there the coroutine gets
    a loop of its own in a worker thread, with the caller's context (an open call log, say).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    result: dict[str, Any] = {}
    context = contextvars.copy_context()

    def worker() -> None:
        try:
            result["value"] = context.run(asyncio.run, coroutine)
        except BaseException as error:  # re-raised in the caller's thread
            result["error"] = error

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def progress(total: int, desc: str, unit: str = "case") -> tqdm:
    """Return a tqdm progress bar counting `unit`s that clears itself when closed; a silent one when
    WORKBOOK_PROGRESS is off (batch kernels: papermill would keep a stale "0%" in the notebook)."""
    from tqdm.auto import tqdm

    from workbook.settings import settings

    return tqdm(total=total, desc=desc, unit=unit, leave=False, disable=not settings().workbook_progress)


def show(table: pd.DataFrame, caption: str) -> None:
    """Display a caption and a table in a notebook, or print them in plain Python."""
    try:
        from IPython.display import Markdown, display

        display(Markdown(caption), table)
    except ImportError:  # plain Python: print instead
        print(caption, table.to_string(), sep="\n")


def wrapped(table: pd.DataFrame) -> Styler:
    """Return a table styled to show long text wrapped, left- and top-aligned."""
    return table.style.set_properties(**{"white-space": "pre-wrap", "text-align": "left", "vertical-align": "top"})


def shown_path(path: Path) -> str:
    """Return a path as a reader should see it: relative to the repository when inside it (no machine paths)."""
    from workbook.settings import REPO

    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


@contextmanager
def environment(**values: str) -> Iterator[None]:
    """Set environment variables for the `with` block (child processes such as papermill kernels
    inherit them), then restore what was there before."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
