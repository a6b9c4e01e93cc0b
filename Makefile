# Two commands on a fresh machine: `make run` (the main job) and `make test`.
# Each creates the virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test test-fast doctor bench docs lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,video,ray]'
	touch $@

# run: the environment, then a verdict per hazard; exits 1 if a fenced strategy corrupts a frame or
# misses a race (`streamsafe hazards --full` prints every row of the matrix).
run: $(VENV)/.installed
	$(VENV)/bin/streamsafe doctor
	$(VENV)/bin/streamsafe hazards

# test: every test, on every core (pytest-xdist: -n auto; worksteal keeps both busy to the end).
# test-fast: the edit loop, under 30 s on two cores: all but the `slow` tests (tests/conftest.py's SLOW).
test: $(VENV)/.installed
	$(PY) -m pytest -n auto --dist worksteal

test-fast: $(VENV)/.installed
	$(PY) -m pytest -n auto --dist worksteal -m "not slow"

doctor: $(VENV)/.installed
	$(VENV)/bin/streamsafe doctor

bench: $(VENV)/.installed
	$(VENV)/bin/streamsafe bench

lint: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[lint]'
	$(VENV)/bin/ruff check streamsafe tests benchmarks docs
	$(VENV)/bin/mypy streamsafe

# docs: the HTML API reference (pdoc) in docs/api/ (not committed), then the hazard pictures.
docs: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[docs]'
	$(PY) docs/gen_api.py docs/api
	$(PY) docs/make_figures.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
