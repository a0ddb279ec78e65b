# `make demo`  runs warden's main job on a built-in default: a sandboxed demo server, a real tool call, a verified
#              audit log.
# `make test`  installs everything the tests need (venv, Python and npm peers, system packages) and runs ruff,
#              mypy --strict and pytest.
# `make bench` prints the benchmark tables.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PEERS  := tests/peers

.PHONY: demo test bench lint typecheck pytest setup clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]' 2>&1 | grep -v "is ignored" || true
	$(BIN)/python -c "import warden, mcp, pytest_trio"  # fail here, not later, if the install broke
	touch $@

$(PEERS)/node_modules/.installed: $(PEERS)/package.json $(PEERS)/package-lock.json
	cd $(PEERS) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

.system-packages: tests/system-packages.txt scripts/setup-system
	scripts/setup-system tests/system-packages.txt
	touch $@

setup: $(VENV)/.installed $(PEERS)/node_modules/.installed .system-packages

lint: $(VENV)/.installed
	$(BIN)/ruff check warden tests bench scripts

typecheck: $(VENV)/.installed
	$(BIN)/mypy --strict warden

# Test files run in parallel, one file per worker at a time (module fixtures stay per file); override with
# PYTEST_ARGS= to run in one process.
PYTEST_ARGS ?= -n auto --dist loadfile

pytest: setup
	$(BIN)/pytest $(PYTEST_ARGS)

test: setup lint typecheck pytest

demo: setup
	$(BIN)/python scripts/demo.py

$(VENV)/.bench-installed: $(VENV)/.installed
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test,bench]' 2>&1 | grep -v "is ignored" || true
	touch $@

bench: setup $(VENV)/.bench-installed
	$(BIN)/python bench/proxy_overhead.py
	$(BIN)/python bench/audit_throughput.py
	$(BIN)/python bench/call_timeline.py

clean:
	rm -rf $(VENV) $(PEERS)/node_modules .system-packages
