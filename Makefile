# Two commands on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
CONFIG ?= serve_app/configs/local-cpu.yaml
EXTRAS ?= cpu,test

# Root installs system packages directly; anyone else through sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup model serve summarize-sample test test-fast prometheus gpu-bench clean

setup: $(INSTALLED)

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	@# PyPI's torchvision/torchaudio/torchcodec break imports beside the CPU torch; text models need none.
	$(PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

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

test: setup prometheus
	$(PY) -m pytest -v -rs

test-fast: setup
	$(PY) -m pytest -v -m "not e2e"

# On a GPU host with vLLM and Ray importable (see README, "GPU benchmarks"); no venv of ours.
gpu-bench:
	bench/gpu_bench.sh all

clean:
	rm -rf $(VENV) .pytest_cache
