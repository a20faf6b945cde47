PYTHON ?= python3

.PHONY: install test test-fast bench reproduce-br1 reproduce-br2

install:
	$(PYTHON) -m pip install -e '.[test]'

test:
	$(PYTHON) -m pytest -q

test-fast:
	GB300LANE_SKIP_DOCKER=1 $(PYTHON) -m pytest -q -m "not slow"
