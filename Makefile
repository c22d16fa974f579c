# train-before-test: `make` lists the targets. Every target sets up what it needs.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PROFILE ?= mini
PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-$(shell cat pyproject.toml requirements.lock | cksum | cut -d' ' -f1)

# Caches stay inside the (git-ignored) project folders, so runs are clean and reproducible; a
# HF_HOME set by the user wins (a shared model cache, the token of `hf auth login`). Without one,
# the hub token saved in the default place is still found.
export HF_HOME            ?= $(CURDIR)/.cache/hf
ifeq ($(origin HF_TOKEN)$(origin HF_TOKEN_PATH),undefinedundefined)
ifneq ($(wildcard $(HOME)/.cache/huggingface/token),)
export HF_TOKEN_PATH      := $(HOME)/.cache/huggingface/token
endif
endif
export MPLCONFIGDIR       := $(CURDIR)/.cache/matplotlib
export JUPYTER_CONFIG_DIR := $(CURDIR)/.cache/jupyter/config
export JUPYTER_DATA_DIR   := $(CURDIR)/.cache/jupyter/data
export JUPYTER_RUNTIME_DIR:= $(CURDIR)/.cache/jupyter/runtime
export IPYTHONDIR         := $(CURDIR)/.cache/ipython
export PIP_CACHE_DIR      := $(CURDIR)/.cache/pip
export TOKENIZERS_PARALLELISM := false
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: help venv all run test lint lab data models bench lock clean

help: ## list the targets (default)
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  variables: PROFILE=$(PROFILE) (mini | smoke | published | paper_slice | paper), HARMONY_DATA=<published data folder>"

venv: $(STAMP) ## create .venv with the pinned environment (torch CPU 2.13.0)

# The stamp's name carries a checksum of the pins, so a changed pin re-installs; file dates do not
# matter (a fresh clone has new dates but the same pins).
$(STAMP):
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==25.3
	$(PY) -m pip install --quiet -c requirements.lock -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

all: $(STAMP) ## run every stage of PROFILE through papermill (cached; then `published` if its data is present)
	$(PY) -m lib.run $(PROFILE) $(if $(filter mini,$(PROFILE)),--then-published,)

run: $(STAMP) ## run chosen stages of PROFILE, e.g. `make run PROFILE=smoke STAGES="04 05" FORCE=1`
	$(PY) -m lib.run $(PROFILE) $(if $(STAGES),--stages $(STAGES),) $(if $(FORCE),--force,)

test: $(STAMP) lint ## run the linter and the test suite (offline; HARMONY_DATA enables the published-data tests)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(PY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP) ## check code and notebooks with ruff (configured in pyproject.toml)
	$(VENV)/bin/ruff check lib tests bench notebooks

lab: $(STAMP) ## open JupyterLab with the project's kernel registered
	$(PY) -m ipykernel install --sys-prefix --name train-before-test --display-name "train-before-test (.venv)"
	$(VENV)/bin/jupyter lab notebooks/

data: $(STAMP) ## download the published reference data (pinned commits, sha256-checked) into data/
	$(PY) -m lib.data download

models: $(STAMP) ## download and check every model and dataset of PROFILE before GPU jobs start (hub profiles)
	$(PY) -m lib.pipeline.cluster models $(PROFILE) $(if $(CHECK_ONLY),--check-only,)

bench: $(STAMP) ## run the speed benchmarks quoted in the README (writes bench/results/*.json)
	for s in bench/bench_*.py; do echo "== $$s"; $(PY) $$s || exit 1; done

lock: $(STAMP) ## re-freeze requirements.lock from the current .venv
	$(PY) -m pip freeze --exclude-editable | sed 's/+cpu$$//' > requirements.lock

clean: ## remove generated outputs (keeps .venv and caches)
	find outputs -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
