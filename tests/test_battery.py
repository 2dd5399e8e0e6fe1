"""The manual battery: YAML schema, labels (append-only, torn writes), the widget, promotion."""

import pandas as pd
import pytest
from conftest import setenv

import helpers
from workbook.util import text_of


def _answers():
    return pd.DataFrame(
        [
            {"conversation": "breach_sequel", "turn": 1, "user": "What happens in the Breach sequel album?",
             "answer": "It is unreleased.", "group": "false_premise", "expect": "Says Breach is final.",
             "model": "local/qwen-0.5b", "prompt_version": "v2", "answer_digest": "abc123"},
            {"conversation": "nico_follow_up", "turn": 1, "user": "Who is Nico?", "answer": "A bishop.",
             "group": "multi_turn", "expect": "Chief bishop.", "model": "local/qwen-0.5b", "prompt_version": "v2",
             "answer_digest": "def456"},
            {"conversation": "nico_follow_up", "turn": 2, "user": "And in the end?", "answer": "Defeated.",
             "group": "multi_turn", "expect": "Clancy defeats him.", "model": "local/qwen-0.5b", "prompt_version": "v2",
             "answer_digest": "ghi789"},
        ]
    )  # fmt: skip


@pytest.fixture
def labels_dir(tmp_path, monkeypatch):
    setenv(monkeypatch, WORKBOOK_LABELS=str(tmp_path / "labels"))
    return tmp_path / "labels"


def test_committed_battery_has_enough_conversations_and_multi_turn():
    conversations = helpers.load_battery("archivist")
    assert len(conversations) >= 20
    assert sum(len(c.turns) > 1 for c in conversations) >= 6
    assert {"false_premise", "multi_turn"} <= {c.group for c in conversations}


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("- id: x\n  group: g\n  expect: e\n", r"conversations\[0\] \(id 'x'\): field 'turns'"),
        ("- id: Bad-Id\n  group: g\n  turns: [hi]\n  expect: e\n", r"field 'id' must be snake_case"),
        ("- id: x\n  group: g\n  turns: ['', 'b']\n  expect: e\n", r"field 'turns' must be a list of non-empty"),
        (
            "- id: x\n  group: g\n  turns: [a]\n  expect: e\n- id: x\n  group: g\n  turns: [a]\n  expect: e\n",
            r"conversations\[1\] reuses id 'x'",
        ),
    ],
)
def test_schema_errors_name_file_and_item(tmp_path, item, message):
    path = tmp_path / "mine.yaml"
    path.write_text("battery: mine\nconversations:\n" + "\n".join("  " + line for line in item.splitlines()) + "\n")
    with pytest.raises(helpers.BatteryError, match=rf"mine.yaml: .*{message}"):
        helpers.load_battery(path)


def test_latest_label_wins_and_history_is_kept(labels_dir):
    row = _answers().iloc[0]
    helpers.save_label(row, "pass", labeller="ana")
    helpers.save_label(row, "fail", "agent_outdated_knowledge", "treats Breach as unreleased", labeller="ana")
    assert len(helpers.read_labels(latest=False)) == 2
    latest = helpers.read_labels()
    assert len(latest) == 1 and latest.verdict[0] == "fail" and latest.failure_kind[0] == "agent_outdated_knowledge"


def test_an_adjudication_sits_beside_the_blind_label_and_never_overwrites_it(labels_dir):
    first, second, third = (row for _, row in _answers().iterrows())
    helpers.save_label(first, "pass", labeller="ana")
    helpers.save_label(second, "fail", labeller="ana")
    blind_file = (labels_dir / "archivist.csv").read_text()
    helpers.save_label(first, "fail", "agent_outdated_knowledge", "after seeing the judge", "bo", adjudication=True)
    helpers.save_label(third, "pass", labeller="bo", adjudication=True)  # adjudicated, never labelled blind
    assert (labels_dir / "archivist.csv").read_text() == blind_file
    labels = helpers.read_labels().set_index("answer_digest")
    assert labels.loc["abc123", ["verdict", "adjudicated_verdict", "adjudicated_kind"]].tolist() == [
        "pass", "fail", "agent_outdated_knowledge"
    ]  # fmt: skip
    assert labels.loc["def456", "adjudicated_verdict"] == "" and labels.loc["ghi789", "verdict"] == ""
    joined = helpers.with_labels(_answers()).set_index("answer_digest")
    assert joined.loc["abc123", ["verdict", "adjudicated_verdict"]].tolist() == ["pass", "fail"]


def test_a_torn_write_is_ignored_and_the_file_stays_usable(labels_dir):
    answers = _answers()
    helpers.save_label(answers.iloc[0], "fail", "agent_outdated_knowledge", labeller="ana")
    path = labels_dir / "archivist.csv"
    with open(path, "a") as handle:
        handle.write("2026-11-29T10:00:00,ana,archivist,nico_follow_up,1,v2,local/qwen-0.5b,def4")  # crash here
    helpers.save_label(answers.iloc[1], "pass", labeller="ana")
    labels = helpers.read_labels()
    assert list(labels.conversation) == ["breach_sequel", "nico_follow_up"]
    assert path.read_text().count("\n") == 4  # header, two labels, the torn line kept apart on its own line


def test_an_edited_row_fails_its_checksum(labels_dir):
    helpers.save_label(_answers().iloc[0], "pass", labeller="ana")
    path = labels_dir / "archivist.csv"
    path.write_text(path.read_text().replace(",pass,", ",fail,"))
    with pytest.raises(helpers.LabelFileError, match="archivist.csv line 2: checksum mismatch"):
        helpers.read_labels()


def test_bad_verdict_or_kind_is_refused(labels_dir):
    with pytest.raises(helpers.WorkbookError, match="pass' or 'fail"):
        helpers.save_label(_answers().iloc[0], "maybe")
    with pytest.raises(helpers.WorkbookError, match="agent_outdated_knowledge"):
        helpers.save_label(_answers().iloc[0], "fail", "bad_vibes")


def test_widget_save_path_without_a_browser(labels_dir):
    widget = helpers.LabellingWidget(_answers(), labeller="workshop")
    widget.verdict.value = "fail"
    widget.kind.value = "agent_confidence_without_basis"
    widget.note.value = "invents a plot"
    saved = widget.save_current()
    assert saved["conversation"] == "breach_sequel" and saved["labeller"] == "workshop"
    assert widget.position == 1 and "1 labelled" in widget.status.value
    assert "Who is Nico?" in widget.view.value
    widget.move(1)
    assert "A bishop." in widget.view.value  # the earlier turn is shown for a follow-up
    assert helpers.read_labels().failure_kind.tolist() == ["agent_confidence_without_basis"]


def test_promotion_builds_a_case_adk_accepts(tmp_path):
    from google.adk.evaluation.eval_set import EvalSet

    target = tmp_path / "promoted.evalset.json"
    helpers.promote_to_evalset(_answers(), "nico_follow_up", "Clancy defeats Nico in City Walls.", evalset=target)
    helpers.promote_to_evalset(_answers(), "breach_sequel", "Breach is the final chapter.", evalset=target)
    evalset = EvalSet.model_validate_json(target.read_text())
    case = evalset.eval_cases[0]
    assert [c.eval_id for c in evalset.eval_cases] == ["battery_nico_follow_up", "battery_breach_sequel"]
    assert [text_of(i.user_content) for i in case.conversation] == ["Who is Nico?", "And in the end?"]
    assert text_of(case.conversation[-1].final_response) == "Clancy defeats Nico in City Walls."
    with pytest.raises(helpers.WorkbookError, match="already has a case"):
        helpers.promote_to_evalset(_answers(), "breach_sequel", "again", evalset=target)
