"""pytest plugin for ``make ecosystem``: bind a suite to a loop and record the loops that ran.

Loaded with ``-p corun_plugin``. ``CORUN_ECOSYSTEM_LOOP=corun`` hands corun's loop
factory to the hooks that take one (``IsolatedAsyncioTestCase.loop_factory`` on 3.13+,
pytest-asyncio's ``pytest_asyncio_loop_factories``, uvicorn's ``loop`` setting) and
installs ``corun.EventLoopPolicy`` for the rest, before any test module is imported. In either mode the plugin writes one JSON
line per test to ``$CORUN_ECOSYSTEM_REPORT``: its outcome, a one-line message
for a failure, and the classes of the event loops that ran (and were created)
during the test, so the harness can tell that corun's loop really was used.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import json
import os
import sys
import threading
from collections.abc import Callable, Generator
from typing import Any

import pytest

LOOP = os.environ.get("CORUN_ECOSYSTEM_LOOP", "asyncio")
REPORT = os.environ.get("CORUN_ECOSYSTEM_REPORT")
if LOOP not in ("asyncio", "corun"):
    raise RuntimeError(f"CORUN_ECOSYSTEM_LOOP must be 'asyncio' or 'corun', not {LOOP!r}")

# Loop classes seen since the last reset, filled from any thread (tests run servers
# in threads); set.add is atomic under the GIL, the lock only guards the swap.
_lock = threading.Lock()
_ran: set[str] = set()
_created: set[str] = set()


def _class_name(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _take() -> tuple[list[str], list[str]]:
    """The loop classes that ran / were created since the last call, and reset."""
    with _lock:
        ran, created = sorted(_ran), sorted(_created)
        _ran.clear()
        _created.clear()
    return ran, created


# Every loop that runs, stdlib, corun or a third party's, announces itself through
# asyncio.events._set_running_loop once per run_forever/run_until_complete; the
# hook costs one set.add per loop start, not per callback. It is installed before
# corun (or anything else) is imported, so a module binding the name at import
# time gets the wrapper too.
_original_set_running_loop = asyncio.events._set_running_loop


def _recording_set_running_loop(loop: asyncio.AbstractEventLoop | None) -> None:
    if loop is not None:
        _ran.add(_class_name(loop))
    _original_set_running_loop(loop)


asyncio.events._set_running_loop = _recording_set_running_loop
asyncio._set_running_loop = _recording_set_running_loop  # type: ignore[attr-defined]


def _record_init(cls: type[Any]) -> None:
    """Make ``cls.__init__`` record the class of each instance it creates."""
    original: Callable[..., None] = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _created.add(_class_name(self))
        original(self, *args, **kwargs)

    cls.__init__ = __init__


_record_init(asyncio.BaseEventLoop)

if LOOP == "corun":
    import corun

    _record_init(corun.EventLoop)


def _policy() -> object:
    """The event loop policy; on 3.14+ without asyncio's DeprecationWarning (which a
    suite's ``filterwarnings = error`` would turn into a failure of the test)."""
    get = getattr(asyncio.events, "_get_event_loop_policy", None)  # 3.14+
    return get() if get is not None else asyncio.get_event_loop_policy()


def _is_corun_policy() -> bool:
    return type(_policy()).__module__.startswith("corun")


def _install_corun_policy() -> None:
    # corun.install() sets corun.EventLoopPolicy without passing 3.14's warning on.
    corun.install()


def _use_loop_factories() -> None:
    """Hand corun's loop factory to the hooks the running CPython offers for one.

    ``unittest.IsolatedAsyncioTestCase.loop_factory`` (3.13+) is asyncio's own way
    to pick a test case's loop; a test case that sets its own keeps it. The policy
    stays for what has no such hook (``asyncio.run(main())``,
    ``asyncio.new_event_loop()``), since policies are deprecated only from 3.14.
    """
    import unittest

    if sys.version_info >= (3, 13) and unittest.IsolatedAsyncioTestCase.loop_factory is None:
        unittest.IsolatedAsyncioTestCase.loop_factory = staticmethod(corun.new_event_loop)  # type: ignore[assignment]


class PytestAsyncioLoopFactories:
    """pytest-asyncio >= 1.4's ``pytest_asyncio_loop_factories`` hook: its tests and
    fixtures run on corun's loop without the policy. Registered in the corun pass only
    (the asyncio pass keeps pytest-asyncio's defaults), and only with a pytest-asyncio
    that has the hook."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_asyncio_loop_factories(self) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
        return {"corun": corun.new_event_loop}


def uvicorn_loop_factory(use_subprocess: bool = False) -> Callable[[], asyncio.AbstractEventLoop]:
    """uvicorn >= 0.36 ``loop`` factory hook: corun's loops."""
    return corun.new_event_loop


def uvicorn_loop_setup(use_subprocess: bool = False) -> None:
    """uvicorn < 0.36 ``loop`` setup hook: it sets a policy, so set corun's."""
    _install_corun_policy()


def _map_uvicorn_loops() -> None:
    """Send uvicorn's ``loop`` setting to corun: "corun", and the "auto"/"asyncio"
    that the suites' servers ask for (they would build SelectorEventLoop directly)."""
    try:
        import uvicorn.config
    except ImportError:
        return
    for table, target in (
        ("LOOP_FACTORIES", "corun_plugin:uvicorn_loop_factory"),  # uvicorn >= 0.36
        ("LOOP_SETUPS", "corun_plugin:uvicorn_loop_setup"),  # older uvicorn
    ):
        entries = getattr(uvicorn.config, table, None)
        if isinstance(entries, dict):
            for name in ("corun", "auto", "asyncio"):
                entries[name] = target


if LOOP == "corun":
    _install_corun_policy()
    _use_loop_factories()
    _map_uvicorn_loops()


# Per-test bookkeeping: the worst outcome over setup/call/teardown and its message.
_outcomes: dict[str, tuple[str, str]] = {}
_policy_resets: set[str] = set()


def _write(record: dict[str, Any]) -> None:
    # One line per test, appended at once: a run killed at its deadline keeps what it did.
    if REPORT:
        with open(REPORT, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")


def _crash_message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None) if crash is not None else None
    if not message:
        lines = [line for line in report.longreprtext.splitlines() if line.strip()]
        message = lines[-1] if lines else ""
    first = message.strip().splitlines()[0] if message.strip() else ""
    return first[:300]


def pytest_configure(config: pytest.Config) -> None:
    """In the corun pass, register the pytest-asyncio hook when pytest-asyncio has it."""
    if LOOP == "corun" and hasattr(config.pluginmanager.hook, "pytest_asyncio_loop_factories"):
        config.pluginmanager.register(PytestAsyncioLoopFactories(), "corun_pytest_asyncio")


def pytest_report_header() -> str:
    """Show the mode in the run's header."""
    return f"corun ecosystem: loop={LOOP}, policy={type(_policy()).__name__}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Put corun's policy back if an earlier test or fixture replaced it."""
    if LOOP == "corun" and not _is_corun_policy():
        _policy_resets.add(item.nodeid)
        _install_corun_policy()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Fold the three phases into one outcome: failed > skipped > passed."""
    if report.failed:
        outcome = "failed"
    elif report.skipped:
        # An expected failure that failed counts as a skip: nothing to fix.
        outcome = "skipped"
    elif report.when == "call":
        outcome = "passed"
    else:
        return
    rank = {"passed": 0, "skipped": 1, "failed": 2}
    previous = _outcomes.get(report.nodeid)
    if previous is None or rank[outcome] > rank[previous[0]]:
        message = _crash_message(report) if outcome == "failed" else ""
        if report.failed and report.when != "call":
            message = f"[{report.when}] {message}"
        _outcomes[report.nodeid] = (outcome, message)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    """Attribute the loops seen between two tests to the test that ran in between."""
    outside = _take()
    if any(outside):
        _write(
            {
                "nodeid": "<outside tests>",
                "outcome": "none",
                "ran": outside[0],
                "created": outside[1],
            }
        )
    yield
    ran, created = _take()
    outcome, message = _outcomes.pop(item.nodeid, ("skipped", ""))
    record: dict[str, Any] = {
        "nodeid": item.nodeid,
        "outcome": outcome,
        "message": message,
        "ran": ran,
        "created": created,
    }
    if item.nodeid in _policy_resets:
        record["policy_reset"] = True
    _write(record)


def pytest_sessionfinish() -> None:
    """Report loops that ran after the last test (session fixtures' teardown)."""
    ran, created = _take()
    if ran or created:
        _write({"nodeid": "<outside tests>", "outcome": "none", "ran": ran, "created": created})
