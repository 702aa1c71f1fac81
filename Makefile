# corun developer entry points. Every target creates/uses ./.venv on its own.
#   make install   create .venv and install corun editable with dev extras
#   make test      full pytest suite (our tests + CPython asyncio conformance)
#   make demo      run examples/demo.py under corun
#   make lint      ruff check, ruff format --check, mypy --strict src

PYTHON ?= python3
VENV   ?= .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.install-stamp
PYTEST_ARGS ?=

.PHONY: install test conformance conformance-baseline demo bench lint clean

install: $(STAMP)

$(VPY):
	$(PYTHON) -m venv $(VENV)

# Re-installs only when pyproject.toml changes (or the venv was removed).
$(STAMP): pyproject.toml | $(VPY)
	$(VPY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

test: install
	$(VPY) -m pytest $(PYTEST_ARGS)

# Only the CPython asyncio suites, against corun's loop.
conformance: install
	$(VPY) -m pytest tests/conformance $(PYTEST_ARGS)

# The same harness bound to the stdlib loop/Future/Task (baseline numbers).
conformance-baseline: install
	CORUN_CONFORMANCE_LOOP=asyncio $(VPY) -m pytest tests/conformance $(PYTEST_ARGS)

demo: install
	$(VENV)/bin/corun run examples/demo.py

bench: install
	@if [ -d benchmarks ]; then \
		$(VPY) -m benchmarks; \
	else \
		echo "No benchmarks yet: benchmarks/ arrives with the speed issue."; \
	fi

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict src

clean:
	rm -rf $(VENV) build dist src/*.egg-info .mypy_cache .ruff_cache .pytest_cache
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
	find src -name '*.so' -delete
