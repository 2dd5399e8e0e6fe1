"""JupyterLab as its users run it: a real lab server, Debian's Chromium driven by Selenium, the lab kernel.

Notebook 03 runs with `interactive = True` and two answers are labelled with the widget in the browser;
notebook 01 runs all its cells. The kernel replays strictly (WORKBOOK_RECORD_MODE=replay) and labels go
to a temp copy of data/labels (WORKBOOK_LABELS). Screenshots land in outputs/screenshots/ for a person.
"""

import csv
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from conftest import REPO

import helpers

SCREENSHOTS = REPO / "outputs" / "screenshots"
LABELLER = "jupyterlab-test"
FAIL_KIND = "agent_confidence_without_basis"
FAIL_NOTE = "lab test: claims a confirmation the band never gave"
APT_TIMEOUT_S = 600
SERVER_START_S = 120
KERNEL_IDLE_S = 180
RUN_ALL_S = 420
UI_S = 60


def _browser_binaries() -> tuple[str, str]:
    """Return Debian's chromium and chromedriver, installing them with apt-get once if they are missing."""

    def found():
        return shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")

    chromium, driver = found()
    if (not chromium or not driver) and shutil.which("apt-get") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        try:
            subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=APT_TIMEOUT_S)
            subprocess.run(
                ["apt-get", "install", "-y", "-qq", "chromium", "chromium-driver"],
                env=env,
                capture_output=True,
                timeout=APT_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            pass
        chromium, driver = found()
    if not chromium or not driver:
        pytest.skip("Debian's chromium and chromium-driver are absent and apt-get could not install them")
    return chromium, driver


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _write_lab_settings(folder: Path) -> None:
    """User settings for this lab only: no autosave (it would race our explicit save), every cell in the
    DOM (windowing would hide off-screen prompts), no news or update checks (no network, no toasts)."""
    settings = {
        "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    }
    for plugin, values in settings.items():
        path = folder / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def _stop(process: subprocess.Popen, base_url: str, token: str) -> None:
    """Stop the lab server and every kernel it started: ask politely, then terminate, then kill."""
    import psutil

    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    if process.poll() is None:
        try:
            request = urllib.request.Request(f"{base_url}api/shutdown", method="POST")
            request.add_header("Authorization", f"token {token}")
            urllib.request.urlopen(request, timeout=10).close()
            process.wait(timeout=30)
        except Exception:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(children, timeout=10)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A `jupyter lab` from this venv on 127.0.0.1 (free port, token auth), rooted at the repo."""
    tmp = tmp_path_factory.mktemp("jupyterlab")
    labels = tmp / "labels"
    shutil.copytree(REPO / "data" / "labels", labels)
    _write_lab_settings(tmp / "lab-settings")
    port, token = _free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "WORKBOOK_RECORD_MODE": "replay",  # strict: a missing recording fails, no model is called
        "WORKBOOK_LABELS": str(labels),
        "WORKBOOK_OUTPUTS": str(tmp / "outputs"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "JUPYTER_CONFIG_DIR": str(tmp / "jupyter-config"),  # no user config leaks in
        "JUPYTER_DATA_DIR": str(tmp / "jupyter-data"),  # no user-level kernelspec shadows the venv's
        "JUPYTER_RUNTIME_DIR": str(tmp / "jupyter-runtime"),
    }
    log = tmp / "lab.log"
    command = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={REPO}",
        f"--LabApp.user_settings_dir={tmp / 'lab-settings'}", f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
    ]  # fmt: skip
    if os.geteuid() == 0:  # containers and CI run as root; the server still listens on loopback only
        command.append("--allow-root")
    with log.open("w") as sink:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/"
    copies: list[Path] = []
    server = SimpleNamespace(url=base_url, token=token, labels=labels, log=log, copies=copies)
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            assert process.poll() is None, f"jupyter lab exited early:\n{log.read_text()[-3000:]}"
            try:
                urllib.request.urlopen(f"{base_url}api/status?token={token}", timeout=5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"jupyter lab did not answer:\n{log.read_text()[-3000:]}"
                time.sleep(0.5)
        yield server
    finally:
        _stop(process, base_url, token)
        for copy in copies:
            copy.unlink(missing_ok=True)


@pytest.fixture
def browser(tmp_path):
    """Debian's Chromium, headless, driven through Debian's chromedriver (Selenium downloads nothing)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = _browser_binaries()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--window-size=1400,1100", f"--user-data-dir={tmp_path / 'chrome-profile'}",
    ):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
    driver.set_page_load_timeout(UI_S * 2)
    driver.set_script_timeout(UI_S)
    try:
        yield driver
    finally:
        driver.quit()


def _notebook_copy(lab, name: str, **replace: str) -> Path:
    """Copy notebooks/<name> beside itself (git-ignored *.lab-test.ipynb), so the kernel's cwd stays
    notebooks/ and the committed notebook is never written; `replace` rewrites parameter lines."""
    notebook = nbformat.read(REPO / "notebooks" / name, as_version=4)
    parameters = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    for variable, value in replace.items():
        parameters.source, count = re.subn(
            rf"^{variable} = .*?(  #|$)", rf"{variable} = {value}\1", parameters.source, count=1, flags=re.M
        )
        assert count == 1, f"no parameter {variable} in {name}"
    copy = REPO / "notebooks" / name.replace(".ipynb", ".lab-test.ipynb")
    lab.copies.append(copy)
    nbformat.write(notebook, copy)
    return copy


def _wait(driver, condition, timeout: float, what: str, lab=None):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.5).until(condition)
    except TimeoutException:
        _shot(driver, "timeout")
        tail = lab.log.read_text()[-3000:] if lab else ""
        pytest.fail(f"timed out after {timeout}s waiting for {what}\n{tail}")


def _shot(driver, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"jupyterlab_{name}.png"
    driver.save_screenshot(str(path))
    return path


_STATUS_TEXTS = "return [...document.querySelectorAll('.jp-StatusBar-TextItem')].map(e => e.textContent.trim())"


def _open(driver, lab, copy: Path) -> None:
    """Open a notebook in a fresh workspace; wait until the lab has connected it to an idle python3 kernel."""
    from selenium.webdriver.common.by import By

    path = copy.relative_to(REPO).as_posix()
    driver.get(f"{lab.url}lab/tree/{path}?reset&token={lab.token}")
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel .jp-CodeCell"), UI_S, "notebook", lab)

    def kernel_ready(d) -> bool:
        request = urllib.request.Request(f"{lab.url}api/sessions", headers={"Authorization": f"token {lab.token}"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            kernels = [s["kernel"] for s in json.load(answer) if s["path"] == path and s.get("kernel")]
        shown = d.execute_script(_STATUS_TEXTS)  # the status bar says e.g. "Python 3 | Idle"
        return any(k["execution_state"] == "idle" for k in kernels) and any(
            re.fullmatch(r"(?!No Kernel).+ \| Idle", text) for text in shown
        )

    _wait(driver, kernel_ready, KERNEL_IDLE_S, "the notebook's kernel to be connected and idle", lab)
    request = urllib.request.Request(f"{lab.url}api/sessions", headers={"Authorization": f"token {lab.token}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        names = {s["kernel"]["name"] for s in json.load(answer) if s["path"] == path}
    assert names == {helpers.KERNEL_NAME}, f"the lab started {names}, not the notebook's {helpers.KERNEL_NAME}"


def _settle(driver, lab, quiet_s: float = 1.5) -> None:
    """Wait until the kernel has been idle for `quiet_s`: ipywidgets buffers fast state updates (a typed
    note is one per key) until the kernel is idle, but sends a button click at once, so a click made
    too soon could overtake the note, which a person, slower than Selenium, never sees."""
    quiet_since = [None]

    def quiet(d) -> bool:
        idle = any(re.fullmatch(r"(?!No Kernel).+ \| Idle", text) for text in d.execute_script(_STATUS_TEXTS))
        if not idle:
            quiet_since[0] = None
            return False
        quiet_since[0] = quiet_since[0] or time.monotonic()
        return time.monotonic() - quiet_since[0] >= quiet_s

    _wait(driver, quiet, UI_S, "the kernel to settle", lab)


def _menu(driver, lab, menu: str, item: str) -> None:
    """Click a main-menu entry by its visible labels, as a person would: menu bar, then the item."""
    from selenium.webdriver.common.by import By

    bar = f"//div[contains(@class, 'lm-MenuBar-itemLabel') and normalize-space()='{menu}']"
    _wait(driver, lambda d: d.find_elements(By.XPATH, bar), UI_S, f"the {menu} menu", lab)[0].click()
    entry = f"//li[contains(@class, 'lm-Menu-item')][.//div[contains(@class, 'lm-Menu-itemLabel') and normalize-space()='{item}']]"
    _wait(driver, lambda d: d.find_elements(By.XPATH, entry), UI_S, f"menu item {menu} > {item}", lab)[0].click()


_PROMPTS = "return [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(p => p.textContent.trim())"


def _run_all(driver, lab) -> None:
    """Run all cells from the Run menu; return once every queued cell has finished (or was aborted)."""
    _menu(driver, lab, "Run", "Run All Cells")
    from selenium.webdriver.common.by import By

    time.sleep(1)
    dialogs = [dialog.text for dialog in driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog")]
    if dialogs:
        _shot(driver, "unexpected_dialog")
    assert not dialogs, f"a dialog interrupted Run All: {dialogs}"
    _wait(driver, lambda d: any("*" in p or any(c.isdigit() for c in p) for p in d.execute_script(_PROMPTS)),
          UI_S, "the cells to be queued", lab)  # fmt: skip
    _wait(driver, lambda d: not any("*" in p for p in d.execute_script(_PROMPTS)), RUN_ALL_S, "run all", lab)


def _save(driver, lab, copy: Path) -> nbformat.NotebookNode:
    """Save from the File menu and return the notebook as written to disk."""
    from selenium.webdriver.common.by import By

    before = copy.stat().st_mtime_ns
    _menu(driver, lab, "File", "Save Notebook")
    dirty = ".lm-TabBar-tab.lm-mod-current.jp-mod-dirty"
    _wait(driver, lambda d: copy.stat().st_mtime_ns != before and not d.find_elements(By.CSS_SELECTOR, dirty),
          UI_S, "the save", lab)  # fmt: skip
    return nbformat.read(copy, as_version=4)


def _error_outputs(notebook: nbformat.NotebookNode) -> list[str]:
    return [
        f"cell {index}: {output.get('ename')}: {output.get('evalue')}"
        for index, cell in enumerate(notebook.cells)
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]


def _label_rows(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_one_kernel_name_everywhere():
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        if path.name.endswith(".lab-test.ipynb"):
            continue
        assert nbformat.read(path, as_version=4).metadata.kernelspec.name == helpers.KERNEL_NAME, path.name
    assert f"--name {helpers.KERNEL_NAME} " in (REPO / "Makefile").read_text()


def test_label_two_answers_with_the_widget_in_jupyterlab(lab, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    committed = (REPO / "data" / "labels" / "archivist.csv").read_bytes()
    label_file = lab.labels / "archivist.csv"
    before_text, before_rows = label_file.read_text(encoding="utf-8"), _label_rows(label_file)
    copy = _notebook_copy(lab, "03_manual_battery.ipynb", interactive="True", labeller=f'"{LABELLER}"')
    _open(browser, lab, copy)
    _run_all(browser, lab)
    assert _error_outputs(_save(browser, lab, copy)) == []

    widget = _wait(
        browser,
        lambda d: d.find_elements(By.XPATH, "//div[contains(@class, 'widget-vbox')][.//*[contains(@class, 'widget-toggle-buttons')]]"),
        UI_S, "the labelling widget to render", lab,
    )[0]  # fmt: skip
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", widget)
    _shot(browser, "03_widget_rendered")

    def status() -> str:
        found = widget.find_elements(By.XPATH, ".//*[contains(text(), ' shown · ')]")
        return found[0].text if found else ""

    def label(verdict: str, kind: str, note: str) -> tuple[str, int]:
        heading = widget.find_element(By.TAG_NAME, "h4").text  # "<conversation> · turn <n> · <group>"
        conversation, turn = re.fullmatch(r"(\S+) · turn (\d+) · .*", heading).groups()
        shown = status()
        widget.find_element(By.XPATH, f".//button[contains(@class, 'widget-toggle-button')][normalize-space()='{verdict}']").click()  # fmt: skip
        Select(widget.find_element(By.CSS_SELECTOR, ".widget-dropdown select")).select_by_visible_text(
            helpers.FAILURE_KINDS[kind] if kind else "(none)"
        )
        box = widget.find_element(By.CSS_SELECTOR, ".widget-text input")
        box.click()
        box.send_keys(Keys.END, *[Keys.BACKSPACE] * len(box.get_attribute("value")), note)
        assert box.get_attribute("value") == note
        _settle(browser, lab)
        widget.find_element(By.XPATH, ".//button[normalize-space()='Save & next']").click()
        _wait(browser, lambda d: status() not in ("", shown), UI_S, "the widget to move on after Save", lab)
        return conversation, int(turn)

    first = label("pass", "", "")
    second = label("fail", FAIL_KIND, FAIL_NOTE)
    _shot(browser, "03_two_answers_labelled")
    widget.screenshot(str(SCREENSHOTS / "jupyterlab_03_widget_after_labelling.png"))

    after_text = label_file.read_text(encoding="utf-8")
    assert after_text.startswith(before_text), "labels are append-only"
    added = _label_rows(label_file)[len(before_rows) :]
    assert [(r["conversation"], int(r["turn"])) for r in added] == [first, second]
    assert [(r["verdict"], r["failure_kind"], r["note"], r["labeller"]) for r in added] == [
        ("pass", "", "", LABELLER),
        ("fail", FAIL_KIND, FAIL_NOTE, LABELLER),
    ]
    assert (REPO / "data" / "labels" / "archivist.csv").read_bytes() == committed, "data/labels was written"


def test_notebook_01_runs_all_cells_in_the_lab_kernel(lab, browser):
    from selenium.webdriver.common.by import By

    copy = _notebook_copy(lab, "01_build_the_archivist.ipynb")
    _open(browser, lab, copy)
    _run_all(browser, lab)
    executed = _save(browser, lab, copy)
    _shot(browser, "01_after_run_all")
    figures = browser.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output img")
    assert figures, "no figure rendered in the lab"
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", figures[0])
    _shot(browser, "01_figure")
    assert _error_outputs(executed) == []
    code = [cell for cell in executed.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code), "run all stopped before the last cell"
