# Two commands do everything on a fresh machine:
#   make run    set up (system packages when root, .venv) and verify the default model
#   make test   same set-up, then the test suite
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SYSTEM_PACKAGES := libopenblas-dev libopenblas0-openmp liblapacke-dev libglib2.0-0 libgl1 libfontconfig1 graphviz ninja-build

.PHONY: run test test-slow setup system-packages clean

run: setup
	$(PY) app.py

# Two workers, one test file each at a time (module fixtures build once): builds are
# single-threaded compiler runs, so two cores halve the wall time. Files go out in
# the order tests/conftest.py gives (longest first), not xdist's most-tests-first,
# which left a one-test file of 3.5 minutes to run alone at the end.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: setup
	$(PY) -m pytest -q $(XDIST) -rfE -m "not slow"

# The checks `make test` leaves out (tests marked slow: more nvcc builds, repeated builds).
test-slow: setup
	$(PY) -m pytest -q $(XDIST) -rfE -m slow

setup: system-packages $(STAMP)

# Installs what is missing when running as root; otherwise names it once.
system-packages:
	@missing=""; for p in $(SYSTEM_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
	    echo "installing system packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing system packages:$$missing"; \
	    echo "  install them with: sudo apt-get install$$missing"; \
	    echo "  (without OpenBLAS, MatMul/Gemm fall back to pure loops; see README 'BLAS')"; \
	  fi; \
	fi

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	if command -v nvcc >/dev/null; then $(PY) -m pip install -q -e ".[dev,gpu]"; fi
	touch $(STAMP)

clean:
	rm -rf $(VENV) .pytest_cache _dacegraphs .dacecache
