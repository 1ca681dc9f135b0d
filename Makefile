# The two set-up commands (README): `make bench` runs the main job, `make test` runs the tests.
# Both create .venv and install the project with torch pinned by constraints.txt.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test test-fast test-durations lint bench codegen validate clean image base-image device-wheels device-venv

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[test,lint]'
	touch $(STAMP)

install: $(STAMP)

# The suite in TEST_WORKERS processes (pytest-xdist), a test file to one process (--dist loadfile: a file's
# module fixtures, such as one real run several tests read, are made once). TEST_WORKERS=0 runs it in this one.
TEST_WORKERS ?= 2
# --no-loadscope-reorder: xdist would hand out the files with the most tests first; tests/conftest.py orders them by
# their recorded seconds instead (tests/durations.json), so the longest start first and the workers end together.
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) $(PYTEST_ARGS)

# Each test file's seconds from a whole run, into tests/durations.json: tests/conftest.py starts the longest
# files first so the two workers end together. Re-run after adding a slow test file.
test-durations: $(STAMP)
	TILEOPS_TEST_DURATIONS=tests/durations.json $(BIN)/python -m pytest -q $(XDIST) $(PYTEST_ARGS)

# For iteration: every test but those marked slow (each about 3 s or more: real runs, docker, Prometheus, the
# GPU compile check). CI runs `make test`, never this alone.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow" $(PYTEST_ARGS)

# ruff (style, imports, bugs) and mypy (types) over the package, configured in pyproject.toml; CI runs it
# before the tests. mypy keeps its cache in .mypy_cache: the first run takes about half a minute, later ones
# seconds (docs/conventions.md).
lint: $(STAMP)
	$(BIN)/ruff check tileops tests benchmarks scripts
	$(BIN)/mypy

# What travels to the GPU machine (docs/gpu-validation.md): .whl/ (git-ignored) with the project's wheel and
# every run-time dependency the machine's Python lacks (tests/data/device/h200-image-packages.txt), for
# CPython 3.12 on manylinux x86-64, resolved by pip from the index; fails with the sizes over 64 MiB.
device-wheels:
	$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) scripts/device_packages.py wheels .whl

# The GPU machine's Python side on this CPU machine (docs/gpu-validation.md, "On the device's software"): CPython 3.12,
# torch 2.11.0 and triton 3.6.0 (a CUDA build from the index, about 4.6 GB), the image's packages the project and
# its tests use, the carried wheels and the checkout (editable). Then, e.g.:
#   .venv-device/bin/python -m pytest -q -n 2 --dist loadfile -m "not slow"
#   PYTHON=$$PWD/.venv-device/bin/python scripts/device-check OUT --dry-run
DEVICE_PYTHON ?= python3.12
DEVICE_VENV   ?= .venv-device
DEVICE_IMAGE_PACKAGES := torch==2.11.0 triton==3.6.0 numpy pyyaml prometheus-client rich matplotlib nvidia-ml-py \
	requests urllib3 jinja2 scipy pytest pytest-xdist pytest-timeout hypothesis
device-venv: device-wheels
	$(DEVICE_PYTHON) -m venv $(DEVICE_VENV)
	$(DEVICE_VENV)/bin/pip install -q $(DEVICE_IMAGE_PACKAGES)
	$(DEVICE_VENV)/bin/pip install -q --no-deps $$(ls .whl/*.whl | grep -v '/tileops-')
	$(DEVICE_VENV)/bin/pip install -q --no-deps -e .

bench: $(STAMP)
	$(BIN)/tileops bench $(BENCH_ARGS)

codegen: $(STAMP)
	$(BIN)/tileops codegen

validate: $(STAMP)
	$(BIN)/tileops validate

# The appliance image (docs/deploy.md): the wheelhouse (build/wheelhouse), then `docker build`
# with no index (extras: gpu, and fast = msgspec for the readers). The Dockerfile's default base is CUDA 12.8 devel on Ubuntu 24.04 (Python 3.12).
# Where no registry is reachable: `make base-image`, then
#   make image BASE_IMAGE=tileops-base:bookworm IMAGE_PYTHON=3.11 IMAGE_EXTRAS=
IMAGE        ?= tileops:latest
BASE_IMAGE   ?=
IMAGE_PYTHON ?= 3.12
IMAGE_EXTRAS ?= gpu,fast
DOCKER       ?= docker

image:
	PYTHON=$(PYTHON) scripts/build-wheelhouse --python-version $(IMAGE_PYTHON) --extras "$(IMAGE_EXTRAS)"
	DOCKER=$(DOCKER) scripts/docker-build $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) \
	  --build-arg REVISION=$$(git rev-parse --short HEAD 2>/dev/null || echo unknown) \
	  --build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ) -t $(IMAGE) .

base-image:
	scripts/build-base-image

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
