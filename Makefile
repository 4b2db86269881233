# vramfit: every target creates the virtual environment first if it is missing.
# Versions are pinned in pyproject.toml only; torch is installed first (from that pin) because
# DeepSpeed's source build imports it.
PYTHON ?= python3
VENV ?= .venv
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
VRAMFIT := $(VENV)/bin/vramfit
PYTEST := $(VENV)/bin/python -m pytest

.DEFAULT_GOAL := help
.PHONY: help venv recipe-guard run validate list show plan doctor review lint test test-fast test-gpu bench clean

# Checked before the environment is built, so a forgotten RECIPE fails at once.
recipe-guard:
	@if [ -z "$(RECIPE)" ]; then echo "RECIPE is not set. Example: make $(firstword $(MAKECMDGOALS)) RECIPE=vlm-r1-h20 (see: make list)" >&2; exit 2; fi

help: ## show this help
	@echo "vramfit: tested training recipes and a runner that checks they fit before launch"
	@echo
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | awk -F'\t' '{printf "  make %-10s %s\n", $$1, $$2}'
	@echo
	@echo "  variables: RECIPE=<name>  SMOKE=1 (tiny CPU/GPU variant)  DRY_RUN=1  NODES=2 (with SMOKE)  RESUME=1  OVERWRITE=1  ARGS='key=value ...'"

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip setuptools wheel
	$(VENV)/bin/pip install -q "$$(grep -o '"torch==[^"]*"' pyproject.toml | tr -d '"')"
	$(VENV)/bin/pip install -q --no-build-isolation -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $@

venv: $(STAMP) ## create .venv with the pinned dependencies

run: recipe-guard $(STAMP) ## run a recipe: make run RECIPE=vlm-r1-h20 [SMOKE=1] [DRY_RUN=1] [NODES=2] [RESUME=1]
	$(VRAMFIT) run $(RECIPE) $(if $(SMOKE),--smoke) $(if $(DRY_RUN),--dry-run) $(if $(NODES),--nodes $(NODES)) $(if $(RESUME),--resume) $(if $(OVERWRITE),--overwrite) $(ARGS)

validate: $(STAMP) ## validate RECIPE, or every recipe when RECIPE is unset
	$(VRAMFIT) validate $(RECIPE) $(ARGS)

list: $(STAMP) ## the recipes in the tree
	$(VRAMFIT) list

show: recipe-guard $(STAMP) ## a recipe and its derived numbers: make show RECIPE=vlm-r1-h20
	$(VRAMFIT) show $(RECIPE) $(ARGS)

plan: recipe-guard $(STAMP) ## predicted memory per GPU and host RAM: make plan RECIPE=vlm-r1-h20
	$(VRAMFIT) plan $(RECIPE) $(ARGS)

doctor: $(STAMP) ## read a crash log: make doctor LOG=runs/x/train.log [RECIPE=...]
	@if [ -z "$(LOG)" ]; then echo "LOG is not set. Example: make doctor LOG=runs/vlm-r1-h20/train.log RECIPE=vlm-r1-h20" >&2; exit 2; fi
	$(VRAMFIT) doctor $(LOG) $(if $(RECIPE),--recipe $(RECIPE))

review: $(STAMP) ## review your own launch script and configs: make review FILES="run.sh ds.json" ARGS="--gpu h20"
	@if [ -z "$(FILES)" ]; then echo "FILES is not set. Example: make review FILES=run_grpo_rec.sh ARGS='--gpu h20'" >&2; exit 2; fi
	$(VRAMFIT) review $(FILES) $(ARGS)

lint: $(STAMP) ## ruff check and ruff format --check (configured in pyproject.toml)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: $(STAMP) lint ## the test suite (CPU; GPU-marked tests are skipped with a reason)
	$(PYTEST) -m "not gpu" $(PYTEST_ARGS)

test-fast: $(STAMP) ## the edit loop: every test but multi-process training, in parallel (< 2 min)
	$(PYTEST) -m "not gpu and not slow" -q -x -n auto $(PYTEST_ARGS)

test-gpu: $(STAMP) ## the GPU-marked tests (Liger, bitsandbytes, real peaks)
	$(PYTEST) -m gpu $(PYTEST_ARGS)

bench: $(STAMP) ## print the benchmark figures (planner accuracy and speed, doctor speed)
	$(VENV)/bin/python benchmarks/planner_accuracy.py
	$(VENV)/bin/python benchmarks/planner_speed.py
	$(VENV)/bin/python benchmarks/doctor_speed.py
	$(VENV)/bin/python benchmarks/cli_speed.py
	$(VENV)/bin/python benchmarks/gpu_memory.py --list

clean: ## remove runs/ smoke outputs (never a recipe or a checkpoint outside runs/)
	rm -rf runs/*-smoke
