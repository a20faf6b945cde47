PYTHON ?= python3

.PHONY: install test test-fast bench reproduce-br1 reproduce-br2

install:
	$(PYTHON) -m pip install -e '.[test]'

# In parallel (pytest-xdist): one worker per core; Docker and podman tests each keep to one worker (tests/conftest.py).
test:
	$(PYTHON) -m pytest -q -n auto --dist loadgroup

test-fast:
	GB300LANE_SKIP_DOCKER=1 $(PYTHON) -m pytest -q -n auto -m "not slow"

reproduce-br1:
	$(PYTHON) -m gb300lane card reproduce br1

reproduce-br2:
	$(PYTHON) -m gb300lane card reproduce br2

# Every benchmark runs even when one misses its floor; the exit code says whether any did.
bench:
	@status=0; for b in verify engine engine_api fidelity boot client reproduce rollback verdicts cli remote; do \
		echo "== benchmarks/$$b.py"; $(PYTHON) benchmarks/$$b.py || status=1; \
	done; exit $$status
