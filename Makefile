# Two commands on a fresh machine (Python 3.11 and the package registries):
#   make demo   installs torchkiln into .venv and runs examples/demo.py
#   make test   installs torchkiln with its test extras into .venv and runs the tests
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU build of torch from the local wheel: an unpinned torch pulls GBs of CUDA packages.
TORCH_PIN ?= torch==2.13.0
PYTEST_ARGS ?= -n 2

.PHONY: demo test install install-test lint

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools

install: $(PY)
	$(PY) -m pip install --quiet $(TORCH_PIN)
	$(PY) -m pip install --quiet -e .

install-test: $(PY)
	$(PY) -m pip install --quiet $(TORCH_PIN)
# torch pinned again in the same resolve: timm's torchvision would otherwise upgrade it.
	$(PY) -m pip install --quiet $(TORCH_PIN) -e '.[test,onnxrt,models,triton]'
# PyPI's torchvision does not load beside the CPU torch ("torchvision::nms does not exist")
# and breaks transformers' imports where it is installed: remove it where it can't import.
	$(PY) -c 'import torchvision' 2>/dev/null || $(PY) -m pip uninstall --quiet -y torchvision

demo: install
	$(PY) examples/demo.py

test: install-test lint
	$(PY) -m pytest $(PYTEST_ARGS) tests

lint: $(PY)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
