# The two set-up commands (README): `make bench` runs the main job, `make test` runs the tests.
# Both create .venv and install the project with torch pinned by constraints.txt.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test bench codegen validate clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/tileops bench $(BENCH_ARGS)

codegen: $(STAMP)
	$(BIN)/tileops codegen

validate: $(STAMP)
	$(BIN)/tileops validate

clean:
	rm -rf $(VENV) build dist .pytest_cache
