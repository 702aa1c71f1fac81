"""The pinned suites that ``make ecosystem`` runs (see docs/ecosystem.md for the choices)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

Server = Literal["postgres", "redis"]


@dataclass(frozen=True)
class TestSource:
    """Where a suite's tests come from: an archive of the library's source.

    ``debian_pool`` is None for a PyPI sdist (fetched with ``pip download --no-binary
    :all:``); otherwise it is a path in the Debian archive's pool, fetched from the
    archive this machine's apt is configured with, and checked against ``sha256``.
    """

    archive: str
    debian_pool: str | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class Suite:
    """One library's test suite, pinned."""

    name: str
    version: str
    #: The library itself, installed from PyPI (a wheel where PyPI has one).
    library: str
    source: TestSource
    #: Paths inside the archive's top folder -> paths in the run folder. Only the tests
    #: and the pytest config are copied, so the library's own source never shadows
    #: the installed package.
    copy: dict[str, str]
    #: The test dependencies, pinned (from the sdist's requirements / extras / groups).
    requirements: tuple[str, ...]
    #: Test selection and options, after our own; run in the run folder.
    pytest_args: tuple[str, ...]
    #: Replaces the suite's ini ``addopts`` (which may ask for xdist, coverage, ...).
    addopts: str = ""
    server: Server | None = None
    #: Seconds per test (pytest-timeout), so a hang fails a test, not the run.
    timeout: int = 60
    #: Minutes for the whole pytest run on one loop, as a last resort.
    deadline: int = 20
    env: dict[str, str] = field(default_factory=dict)
    #: False when the two passes cannot run at the same time: the suite listens on
    #: fixed ports (websockets' proxies, httpx's test servers).
    parallel: bool = True
    #: Tests that run a loop class of their own by design (a custom ``loop_factory``);
    #: their foreign loop is reported as expected instead of failing the loop check.
    own_loop_tests: frozenset[str] = frozenset()
    #: Tests that cannot pass on corun because they assert that the loop *is* the
    #: stdlib's, with why; listed in the results, not counted as corun's failures.
    differences_by_design: dict[str, str] = field(default_factory=dict)
    #: Pins for one CPython ("3.14") that replace the ones above with the same project
    #: name: the version pinned above has no wheel there, or does not work there.
    python_pins: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def packages(self, python: str) -> list[str]:
        """What the suite's venv installs on CPython ``python`` ("3.14"): the library and
        its test dependencies, with that version's pins in place of the general ones."""
        pins = {_project(pin): pin for pin in self.python_pins.get(python, ())}
        packages = [pins.pop(_project(p), p) for p in (self.library, *self.requirements)]
        if pins:
            raise ValueError(f"{self.name}: python_pins for {python} pin no listed project: {pins}")
        return packages


def _project(requirement: str) -> str:
    """The normalised project name of a requirement ("Foo_Bar[x]==1" -> "foo-bar")."""
    name = re.split(r"[\[=<>!~;@ ]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


SUITES: tuple[Suite, ...] = (
    Suite(
        name="uvicorn",
        version="0.54.0",
        library="uvicorn==0.54.0",
        source=TestSource("uvicorn-0.54.0"),
        copy={"tests": "tests", "pyproject.toml": "pyproject.toml"},
        # The `dev` dependency group less linters/coverage/xdist/docs/benchmarks, and the
        # `standard` extra less uvloop: the baseline is asyncio's own loop.
        requirements=(
            "pytest==9.2.0",
            "pytest-mock==3.15.1",
            "trustme==1.2.1",
            "cryptography==50.0.2",
            "a2wsgi==1.10.10",
            "wsproto==1.3.2",
            "zttp==0.0.35",
            "httpx2==2.16.2",
            "httptools==0.9.0",
            "python-dotenv==1.2.4",
            "PyYAML==6.0.3",
            "watchfiles==1.3.0",
            "websockets==17.4",
        ),
        # tests/benchmarks needs pytest-codspeed; ini addopts asks for xdist (-n 8).
        pytest_args=("tests", "--ignore=tests/benchmarks"),
        addopts="-rxXs --strict-config --strict-markers",
        differences_by_design={
            "tests/test_compat.py::test_asyncio_run__default_loop_factory": (
                "asserts that asyncio.run()'s default loop is an asyncio.SelectorEventLoop; "
                "the harness makes corun's loop the default"
            ),
            "tests/test_config.py::test_get_loop_factory[asyncio-_UnixSelectorEventLoop]": (
                "asserts that uvicorn's loop='asyncio' gives the stdlib's selector loop "
                "class; the harness maps it to corun's loop"
            ),
        },
        own_loop_tests=frozenset(
            {
                "tests/test_compat.py::test_asyncio_run__custom_loop_factory",
                "tests/test_compat.py::test_asyncio_run__passing_a_non_awaitable_callback_should_throw_error",
            }
        ),
    ),
    Suite(
        name="websockets",
        version="15.0.1",
        library="websockets==15.0.1",
        # No websockets sdist ships tests/asyncio or tests/legacy (they ship the sans-I/O
        # tests only), so the tests come from Debian's copy of the upstream release
        # tarball, the newest version whose archive the Debian mirror serves.
        source=TestSource(
            "websockets-15.0.1",
            debian_pool="main/p/python-websockets/python-websockets_15.0.1.orig.tar.gz",
            sha256="8451495265af3e368f794c4dc15c99ce90c771d95560f542bff8c64b5455af3b",
        ),
        copy={"tests": "tests"},
        # tests/requirements.txt (the proxy tests run mitmproxy), plus werkzeug for the router.
        requirements=(
            "pytest==9.2.0",
            "python-socks[asyncio]==3.2.1",
            "mitmproxy==11.0.2",
            "werkzeug==3.1.9",
        ),
        pytest_args=("tests/asyncio", "tests/legacy"),
        parallel=False,  # mitmproxy on ports 51080 and 58080
        # 11.0.2 pins Brotli <= 1.1.0 and a zstandard that have no 3.14 wheels (and do not
        # build there); 12.2.1 is the oldest mitmproxy whose dependencies all have them.
        python_pins={"3.14": ("mitmproxy==12.2.1",)},
    ),
    Suite(
        name="httpx",
        version="0.28.1",
        library="httpx[brotli,cli,http2,socks,zstd]==0.28.1",
        source=TestSource("httpx-0.28.1"),
        copy={"tests": "tests", "pyproject.toml": "pyproject.toml"},
        # httpx's requirements.txt (not in the sdist) names pytest, trio, trustme, chardet,
        # uvicorn (the test server) and cryptography; uvicorn as pinned there for 0.28.1.
        requirements=(
            "pytest==9.2.0",
            "trio==0.35.0",
            "trustme==1.2.1",
            "chardet==5.2.0",
            "uvicorn==0.32.1",
            "cryptography==50.0.2",
        ),
        pytest_args=("tests",),
        addopts="-rxXs",
        parallel=False,  # test servers on ports 8000 and 8001
        # uvicorn 0.32.1 calls asyncio.iscoroutinefunction, deprecated in 3.14: under httpx's
        # filterwarnings = error its server task dies at start-up and the session fixture
        # waits for it forever, on both loops. 0.54.0 (the uvicorn suite's) does not.
        python_pins={"3.14": ("uvicorn==0.54.0",)},
    ),
    Suite(
        name="asyncpg",
        version="0.32.0",
        library="asyncpg==0.32.0",
        source=TestSource("asyncpg-0.32.0"),
        copy={"tests": "tests", "pyproject.toml": "pyproject.toml"},
        # The `test` dependency group less flake8/mypy (test__sourcecode, deselected),
        # uvloop and the Kerberos/GSSAPI stack.
        requirements=("pytest==9.2.0", "distro==1.9.0", "cryptography==50.0.2"),
        pytest_args=("tests", "--ignore=tests/test__sourcecode.py"),
        addopts="--strict-markers --tb=native --import-mode=importlib",
        server="postgres",
    ),
    Suite(
        name="redis-py",
        version="8.1.0",
        library="redis==8.1.0",
        source=TestSource("redis-8.1.0"),
        copy={"tests": "tests", "pyproject.toml": "pyproject.toml"},
        # dev_requirements.txt less linters/coverage plugins/profilers/uvloop.
        requirements=(
            "pytest==9.2.0",
            "pytest-asyncio==1.5.0",
            "coverage==7.11.0",
            "ujson==6.1.0",
            "numpy==2.4.6",
            "packaging==26.3",
            "pybreaker==1.4.1",
            "aiohttp==3.14.5",
            "xxhash==3.6.0",
            "redis-entraid==1.2.1",
            "opentelemetry-api==1.45.2",
            "opentelemetry-sdk==1.45.2",
            "opentelemetry-exporter-otlp-proto-http==1.45.2",
        ),
        # Only the asyncio client's tests, on one standalone Redis: multidb and scenario
        # need docker set-ups, the redismod/onlycluster/ssl tests Redis Stack modules, a
        # cluster or a TLS server (they only fail, each after a connection timeout).
        pytest_args=(
            "tests/test_asyncio",
            "--ignore=tests/test_asyncio/test_multidb",
            "--ignore=tests/test_asyncio/test_scenario",
            "--ignore=tests/test_asyncio/test_cluster.py",
            "--ignore=tests/test_asyncio/test_cluster_transaction.py",
            "-m",
            "not redismod and not onlycluster and not ssl",
        ),
        server="redis",
        timeout=30,
        parallel=False,  # test_cwe_404's proxy on port 5380: both runs at once collide
    ),
    Suite(
        name="aiosqlite",
        version="0.22.1",
        library="aiosqlite==0.22.1",
        source=TestSource("aiosqlite-0.22.1"),
        # The tests live inside the package; perf.py is a benchmark.
        copy={"aiosqlite/tests": "aiosqlite_tests"},
        requirements=("pytest==9.2.0",),
        pytest_args=("aiosqlite_tests/smoke.py",),
    ),
)
