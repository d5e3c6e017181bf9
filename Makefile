# Two commands on a fresh machine (Python 3.11 and the package registries):
#   make demo   installs torchkiln into .venv and runs examples/demo.py
#   make test   installs torchkiln with its test extras into .venv and runs the tests
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU build of torch from the local wheel: an unpinned torch pulls GBs of CUDA packages.
TORCH_PIN ?= torch==2.13.0
PYTEST_ARGS ?= -n 2
# Where the launch ABI test finds Triton 3.6 (see install-test)
TRITON_LAUNCHER_SITE ?= .triton36

# The capture suite on Python 3.13 as well (issue 17): torch and pytest only, in its own venv.
PYTHON313 ?= $(shell pyenv root 2>/dev/null)/versions/3.13.0/bin/python
VENV313 ?= .venv313
PY313 := $(VENV313)/bin/python

.PHONY: demo test install install-test lint install-test-313 test-capture-313

# pip's errors only (-qq) where `make demo` installs: its warnings are about the machine's pip
# configuration (index folders without a package's page) and setuptools' notice that an
# editable install maps packages from folders (core/, plugins/), nothing a user must act on.
PIP_QUIET ?= -qq

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_QUIET) --upgrade pip setuptools

install: $(PY)
	$(PY) -m pip install $(PIP_QUIET) $(TORCH_PIN)
	$(PY) -m pip install $(PIP_QUIET) -e .

install-test: $(PY)
	$(PY) -m pip install --quiet $(TORCH_PIN)
# torch pinned again in the same resolve: timm's torchvision would otherwise upgrade it.
	$(PY) -m pip install --quiet $(TORCH_PIN) -e '.[test,onnxrt,openvino,tvm,models,triton]'
# PyPI's torchvision does not load beside the CPU torch ("torchvision::nms does not exist")
# and breaks transformers' imports where it is installed: remove it where it can't import.
	$(PY) -c 'import torchvision' 2>/dev/null || $(PY) -m pip uninstall --quiet -y torchvision
# The C++ guard checks (torchkiln.capture.native), built once for this torch; without a C++
# compiler guards check tensors in Python (the inductor's CPU code needs one as well).
	$(PY) -m torchkiln build-native || echo "C++ guard checks not built: guards check tensors in Python"
# Triton 3.6 (the GPU machine's) beside the venv, not in it: tests/plugins/inductor/
# test_cuda_launch_abi.py compares torchkiln's kernel launches with its C launcher's.
	[ -d $(TRITON_LAUNCHER_SITE)/triton ] || $(PY) -m pip install --quiet --no-deps \
		--target $(TRITON_LAUNCHER_SITE) triton==3.6.0 || echo "Triton 3.6 not installed: the launch ABI test skips"

demo: install
	$(PY) examples/demo.py

# The inductor's compile-only Triton tests again with Triton 3.6, the GPU machine's (its
# launchers, its compile workers, its binaries loaded by key), where it could be installed
TRITON36_TESTS := $(addprefix tests/plugins/inductor/,test_triton_workers.py test_triton_binaries.py test_cuda_launch.py test_triton_launch.py)

test: install-test lint
	TORCHKILN_TEST_TRITON36=$(abspath $(TRITON_LAUNCHER_SITE)) $(PY) -m pytest $(PYTEST_ARGS) tests
	[ ! -d $(TRITON_LAUNCHER_SITE)/triton ] || PYTHONPATH=$(abspath $(TRITON_LAUNCHER_SITE)) \
		$(PY) -m pytest $(PYTEST_ARGS) -p no:cacheprovider $(TRITON36_TESTS)

$(PY313):
	$(PYTHON313) -m venv $(VENV313)

install-test-313: $(PY313)
	$(PY313) -m pip install --quiet $(TORCH_PIN) pytest pytest-xdist numpy
	$(PY313) -m pip install --quiet -e .
	$(PY313) -m torchkiln build-native || echo "C++ guard checks not built: guards check tensors in Python"

test-capture-313: install-test-313
	$(PY313) -m pytest $(PYTEST_ARGS) -p no:cacheprovider tests/core/capture

lint: $(PY)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
