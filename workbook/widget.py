"""The labelling widget (notebooks 03 and 04): label answers one at a time in JupyterLab."""

from __future__ import annotations

import html

from workbook.labels import FAILURE_KINDS, save_label, with_labels


class LabellingWidget:
    """Label battery answers one at a time in JupyterLab: pass/fail, a failure kind, a note.

    Each Save writes the label at once (see `save_label`). Tab moves between the controls and
    Enter presses the focused button. `save_current` is the same action without a browser.
    """

    def __init__(self, answers, battery: str = "archivist", labeller: str = ""):
        import ipywidgets as widgets

        self.answers = with_labels(answers, battery).reset_index(drop=True)
        self.battery, self.labeller, self.position = battery, labeller, 0
        self.view = widgets.HTML()
        self.verdict = widgets.ToggleButtons(options=["pass", "fail"], description="verdict")
        kinds = [("(none)", "")] + [(label, key) for key, label in FAILURE_KINDS.items()]
        self.kind = widgets.Dropdown(options=kinds, description="failure kind")
        self.note = widgets.Text(placeholder="why, in a few words", description="note")
        self.progress = widgets.IntProgress(min=0, max=len(self.answers))
        self.status = widgets.Label()
        save, back, skip = (widgets.Button(description=text) for text in ("Save & next", "Back", "Skip"))
        save.button_style = "primary"
        save.on_click(lambda _: self.save_current())
        back.on_click(lambda _: self.move(-1))
        skip.on_click(lambda _: self.move(1))
        controls = widgets.HBox([save, back, skip, self.progress, self.status])
        self.box = widgets.VBox([self.view, self.verdict, self.kind, self.note, controls])
        self.move(0)

    def save_current(self) -> dict:
        """Return the label saved from the controls for the current answer, after moving to the next one."""
        row = self.answers.loc[self.position]
        saved = save_label(row, self.verdict.value, self.kind.value, self.note.value, self.labeller, self.battery)
        self.answers.loc[self.position, ["verdict", "failure_kind", "note"]] = [
            saved["verdict"],
            saved["failure_kind"],
            saved["note"],
        ]
        self.move(1)
        return saved

    def move(self, step: int) -> None:
        """Show the answer `step` places away (clamped to the list)."""
        self.position = min(max(self.position + step, 0), len(self.answers) - 1)
        row = self.answers.loc[self.position]
        earlier = self.answers[(self.answers.conversation == row.conversation) & (self.answers.turn < row.turn)]
        history = "".join(
            f"<p><b>user:</b> {html.escape(r.user)}<br><b>agent:</b> {html.escape(r.answer)}</p>"
            for r in earlier.itertuples()
        )
        self.view.value = (
            f"<h4>{html.escape(row.conversation)} · turn {row.turn} · {html.escape(str(row.group))}</h4>{history}"
            f"<p><b>user:</b> {html.escape(row.user)}</p><p><b>agent:</b> {html.escape(row.answer)}</p>"
            f"<p style='background:#fff8e1;padding:4px'><b>a good answer:</b> {html.escape(row.expect)}</p>"
        )
        self.verdict.value = row.verdict or "pass"
        self.kind.value = row.failure_kind or ""
        self.note.value = row.note or ""
        done = int((self.answers.verdict != "").sum())
        self.progress.value = done
        self.status.value = f"{self.position + 1}/{len(self.answers)} shown · {done} labelled"

    def _ipython_display_(self):
        from IPython.display import display

        display(self.box)
