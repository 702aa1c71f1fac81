# corun developer entry points. Every target creates/uses ./.venv on its own.
#   make install   create .venv and install corun editable with dev extras, compiled
#                  with mypyc (CORUN_PURE=1 make install: the pure-Python build), and
#                  the servers the tests start (nginx, from Debian, when missing)
#   make test      full pytest suite (our tests + CPython asyncio conformance), in two
#                  phases: the most in parallel (TEST_JOBS), then the serial ones alone
#   make demo      corun demo: corun fetch against a local fault-injecting server
#   make lint      ruff check, ruff format --check, mypy --strict src
#   make test-pure the whole suite again on the pure-Python build (in .venv-pure)

PYTEST_ARGS ?=

# Which CPython (README, "Supported Python"): `make test PY=3.14`. The default is the
# machine's python3 (3.11). 3.12 is pyenv's; 3.13 to 3.15 are Debian sid's, in a chroot
# that scripts/sid.sh builds and every command of theirs runs in ($(RUN)).
PY ?=
SID_PYS := 3.13 3.14 3.15
ifeq ($(PY),)
PYTHON ?= python3
VENV   ?= .venv
RUN    :=
else ifeq ($(PY),3.12)
PYTHON ?= $(shell pyenv prefix 3.12.1 2>/dev/null || echo /nonexistent)/bin/python3.12
VENV   ?= .venv-3.12
RUN    :=
else ifneq ($(filter $(PY),$(SID_PYS)),)
PYTHON ?= python$(PY)
VENV   ?= .venv-$(PY)
RUN    := scripts/sid.sh
else
$(error PY=$(PY): supported are 3.12 and $(SID_PYS), or none for the machine's python3)
endif
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.install-stamp

.PHONY: install test test-pure conformance conformance-baseline demo bench lint clean nginx

install: $(STAMP) nginx

# tests/http runs a real nginx (Debian's package) on a loopback port. Installed when
# missing; when it cannot be, those tests fail and say so (they never skip).
NGINX := /usr/sbin/nginx
nginx:
	@[ -x $(NGINX) ] || command -v nginx >/dev/null 2>&1 || { \
		SUDO=; [ "$$(id -u)" -eq 0 ] || SUDO="sudo -n"; \
		echo "nginx: installing nginx (apt-get)"; \
		{ $$SUDO apt-get update -qq && \
		  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
			nginx >/dev/null; } || \
		echo "nginx: could not install it; the nginx tests in tests/http will fail"; }

$(VPY):
	$(if $(RUN),scripts/sid.sh build)
	$(RUN) $(PYTHON) -m venv $(VENV)

# The compiled modules are built in place next to their sources, so they must be
# rebuilt whenever a source changes: a stale .so would shadow the edited .py.
ENGINE_SOURCES := $(wildcard src/corun/runtime/engine/*.py) \
	src/corun/runtime/transports/_sockio.c

# Re-installs when the build inputs change (or the venv was removed).
$(STAMP): pyproject.toml setup.py $(ENGINE_SOURCES) | $(VPY)
	find src -name "*$$($(RUN) $(VPY) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')" -delete
	$(RUN) $(VPY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	$(RUN) $(VPY) -c 'import corun, sys; print("corun build:", "compiled" if corun.COMPILED else "pure Python", "on", sys.version.split()[0])'
	@touch $@

# Two phases. First every test not marked serial, in TEST_JOBS processes (pytest-xdist;
# a file's tests stay together, in one process); then the serial ones (tests/conftest.py,
# SERIAL_PARTS: they measure timing) in one process, alone. Both run even when the first
# fails. Exit status 5 (no test selected, e.g. PYTEST_ARGS=tests/runtime) is no failure.
# TEST_JOBS=0: the first phase in one process, too.
TEST_JOBS ?= 2
test: install
	@status=0; \
	$(RUN) $(VPY) -m pytest -n $(TEST_JOBS) --dist loadfile -m "not serial" $(PYTEST_ARGS); \
	rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || status=1; \
	$(RUN) $(VPY) -m pytest -m serial $(PYTEST_ARGS); \
	rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || status=1; \
	exit $$status

# The same suite on the pure-Python build, installed (not editable) in its own venv
# so that the compiled modules next to the sources cannot be picked up.
PURE_VENV := .venv-pure
test-pure:
	[ -x $(PURE_VENV)/bin/python ] || $(PYTHON) -m venv $(PURE_VENV)
	CORUN_PURE=1 $(PURE_VENV)/bin/python -m pip install --quiet --disable-pip-version-check '.[dev]'
	cd tests && ../$(PURE_VENV)/bin/python -c 'import corun; assert not corun.COMPILED; print("corun build: pure Python")'
	$(PURE_VENV)/bin/python -m pytest -p no:cacheprovider --rootdir=. -c pyproject.toml $(PYTEST_ARGS)

# Only the CPython asyncio suites, against corun's loop.
conformance: install
	$(RUN) $(VPY) -m pytest tests/conformance $(PYTEST_ARGS)

# The same harness bound to the stdlib loop/Future/Task (baseline numbers).
conformance-baseline: install
	CORUN_CONFORMANCE_LOOP=asyncio $(RUN) $(VPY) -m pytest tests/conformance $(PYTEST_ARGS)

demo: install
	$(RUN) $(VENV)/bin/corun demo

# The benchmark suite (benchmarks/README.md): corun vs asyncio vs uvloop. Installs wrk
# (Debian package) and the `bench` extra (uvloop) when missing, without reinstalling corun.
# Options go through BENCH_ARGS, e.g. `make bench BENCH_ARGS="--quick --only echo"`.
bench: install
	$(if $(RUN),scripts/sid.sh need wrk)
	@[ -n "$(RUN)" ] || command -v wrk >/dev/null 2>&1 || { \
		if command -v apt-get >/dev/null 2>&1; then \
			SUDO=; [ "$$(id -u)" -eq 0 ] || SUDO="sudo -n"; \
			echo "bench: installing wrk (apt-get)"; \
			{ $$SUDO apt-get update -qq && \
			  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq wrk >/dev/null; } || \
			echo "bench: could not install wrk; HTTP load comes from benchmarks/loadgen instead"; \
		else \
			echo "bench: no wrk and no apt-get; HTTP load comes from benchmarks/loadgen instead"; \
		fi; }
	@$(RUN) $(VPY) -c 'import uvloop' 2>/dev/null || { \
		$(RUN) $(VPY) -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["bench"])' \
		| xargs $(RUN) $(VPY) -m pip install --quiet --disable-pip-version-check || \
		echo "bench: could not install uvloop; the suite runs without it"; }
	$(RUN) $(VPY) -m benchmarks $(BENCH_ARGS)

# What observation costs (docs/observe.md): wall clock (benchmarks/observe_overhead.py) and
# instructions under callgrind (benchmarks/observe_instructions.py). Installs valgrind
# (Debian) when missing. OBSERVE_ARGS go to both, e.g. OBSERVE_ARGS="--baseline-root ../old".
OBSERVE_ARGS ?=
.PHONY: bench-observe
bench-observe: install
	@command -v valgrind >/dev/null 2>&1 || { \
		SUDO=; [ "$$(id -u)" -eq 0 ] || SUDO="sudo -n"; \
		echo "bench-observe: installing valgrind (apt-get)"; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq valgrind >/dev/null; }
	$(VPY) -m benchmarks.observe_instructions $(OBSERVE_ARGS)
	$(VPY) -m benchmarks.observe_overhead $(OBSERVE_ARGS)
	$(VPY) -m benchmarks.observe_modes
	for case in echo/protocol/1KiB/c10 echo/streams/1KiB/c10 http/c100; do \
		$(VPY) -m benchmarks.observe_modes --network $$case --repeat 150 || exit 1; done
	$(VPY) -m benchmarks.observe_ps

# Other libraries' own test suites on asyncio's loop and on corun's, with a table of
# the differences (docs/ecosystem.md); not part of `make test`. Installs PostgreSQL and
# Redis (Debian) when missing. One suite: `make ecosystem ECOSYSTEM_ARGS="--suite httpx"`;
# another CPython: `make ecosystem PY=3.14` (results in ecosystem/results-3.14.md).
ECOSYSTEM_ARGS ?=
.PHONY: ecosystem
ecosystem:
	$(if $(RUN),scripts/sid.sh need postgresql redis-server)
	@[ -n "$(RUN)" ] || { ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && command -v redis-server >/dev/null; } || { \
		SUDO=; [ "$$(id -u)" -eq 0 ] || SUDO="sudo -n"; \
		echo "ecosystem: installing postgresql and redis-server (apt-get)"; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql redis-server >/dev/null; }
	$(RUN) $(PYTHON) -m ecosystem.run $(ECOSYSTEM_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict src

clean:
	rm -rf $(VENV) $(PURE_VENV) build dist src/*.egg-info .mypy_cache .ruff_cache .pytest_cache
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
	find src -name '*.so' -delete
