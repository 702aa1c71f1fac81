"""Bind CPython's own ``test.test_asyncio`` suites to corun.

CPython runs each asyncio suite against its event loop in one of two ways, and
this harness does the same with corun:

* Suites that take the loop from the *policy* (``asyncio.run``,
  ``asyncio.new_event_loop``, ``unittest.IsolatedAsyncioTestCase``) are run
  unchanged; ``conftest.py`` installs ``corun.EventLoopPolicy`` around every
  test.  See :func:`bind`.
* Suites written against a Future/Task *class* (``test_futures``,
  ``test_tasks``) define abstract ``Base*Tests`` mixins that CPython binds to
  its Py and C classes.  We bind the same mixins to ``corun.Future`` and
  ``corun.Task`` in ``test_cpython_futures.py`` / ``test_cpython_tasks.py``
  and do not re-collect the stdlib's own Py/C bindings.

``CORUN_CONFORMANCE_LOOP=asyncio`` binds the stdlib instead (default policy,
``asyncio.Future``/``asyncio.Task``, i.e. the C classes) so the very same
node ids give the stdlib baseline.  corun is not imported in that mode.

* Suites written against a *loop class* (``EventLoopTestsMixin``,
  ``BaseSockTestsMixin``, ``SendfileTestsBase``, ``BaseStartServer``, ...)
  are bound CPython's way, with ``create_event_loop()``/``new_loop()``
  returning :attr:`Impl.new_event_loop` (``corun.new_event_loop``) in place
  of ``asyncio.SelectorEventLoop``.  See the network modules below.

``CORUN_CONFORMANCE_LOOP=asyncio`` binds the stdlib instead (default policy,
``asyncio.Future``/``asyncio.Task``, i.e. the C classes, and
``asyncio.SelectorEventLoop`` with its default epoll selector) so the very
same node ids give the stdlib baseline.  corun is not imported in that mode.

``CORUN_CONFORMANCE_EXTRA=1`` additionally collects a few loop-generic classes
that are not part of the issue's 398-test set (see ``test_cpython_tasks.py``
and ``test_cpython_futures2.py``).

The network suites (``test_events``, ``test_sock_lowlevel``,
``test_sendfile``, ``test_streams``, ``test_ssl``, ``test_sslproto``,
``test_server``, ``test_subprocess``, ``test_buffered_proto``,
``test_protocols``: 385 tests) are bound the same way.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
import unittest
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

ENV_LOOP = "CORUN_CONFORMANCE_LOOP"
ENV_EXTRA = "CORUN_CONFORMANCE_EXTRA"
LOOP_CHOICES = ("corun", "asyncio")

#: Name of the global each conformance module sets to the CPython module it runs.
MODULE_ATTR = "CPYTHON_MODULE"


def loop_kind() -> str:
    """``"corun"`` (default) or ``"asyncio"``, from ``$CORUN_CONFORMANCE_LOOP``."""
    kind = os.environ.get(ENV_LOOP, "").strip().lower() or "corun"
    if kind not in LOOP_CHOICES:
        raise pytest.UsageError(f"{ENV_LOOP}={kind!r}: expected one of {', '.join(LOOP_CHOICES)}")
    return kind


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def extras_enabled() -> bool:
    return _flag(ENV_EXTRA)


@dataclass(frozen=True)
class Impl:
    """What the CPython suites are bound to."""

    name: str
    Future: type[Any]
    Task: type[Any]
    policy_factory: Callable[[], asyncio.AbstractEventLoopPolicy]
    loop_class: type[Any] | None
    #: What the loop-class bindings' ``create_event_loop()``/``new_loop()`` return.
    new_event_loop: Callable[[], asyncio.AbstractEventLoop]


@functools.cache
def impl() -> Impl:
    if loop_kind() == "asyncio":
        # What the stdlib binds by default: asyncio.Future/Task are the C
        # classes (_asyncio) when available, the Py ones otherwise.
        return Impl(
            name="asyncio",
            Future=asyncio.Future,
            Task=asyncio.Task,
            policy_factory=asyncio.DefaultEventLoopPolicy,
            loop_class=None,
            # CPython's EPollEventLoopTests: SelectorEventLoop's default
            # selector on Linux is epoll.
            new_event_loop=asyncio.SelectorEventLoop,
        )
    import corun  # deliberately not guarded: a broken corun must fail loudly

    return Impl(
        name="corun",
        Future=corun.Future,
        Task=corun.Task,
        policy_factory=corun.EventLoopPolicy,
        loop_class=corun.EventLoop,
        new_event_loop=corun.new_event_loop,
    )


def cpython_module(ns: MutableMapping[str, Any], name: str) -> ModuleType:
    """Import ``test.test_asyncio.<name>`` or skip the calling test module.

    ``ns`` is the calling module's ``globals()``; it records which CPython
    module it runs (used for exclusion keys and the summary table).
    """
    qualname = f"test.test_asyncio.{name}"
    try:
        module = importlib.import_module(qualname)
    except (ImportError, unittest.SkipTest) as exc:
        pytest.skip(f"{qualname} is not available: {exc}", allow_module_level=True)
    ns[MODULE_ATTR] = name
    return module


def testcase_classes(module: ModuleType) -> dict[str, type[unittest.TestCase]]:
    """TestCase subclasses defined (not merely imported) in ``module``."""
    return {
        attr: obj
        for attr, obj in vars(module).items()
        if isinstance(obj, type)
        and issubclass(obj, unittest.TestCase)
        and obj.__module__ == module.__name__
    }


def bind(
    ns: MutableMapping[str, Any],
    name: str,
    *,
    exclude: Iterable[str] = (),
) -> ModuleType:
    """Collect every TestCase class of ``test.test_asyncio.<name>`` unchanged.

    They run under the policy installed by ``conftest.py``.  ``exclude`` names
    classes not to collect (e.g. the stdlib's own Py/C class bindings); each
    name must exist, so a CPython upgrade cannot silently change the set.
    Per-test exclusions belong in ``exclusions.py``, not here.
    """
    module = cpython_module(ns, name)
    classes = testcase_classes(module)
    excluded = set(exclude)
    unknown = excluded - classes.keys()
    if unknown:
        raise RuntimeError(f"{module.__name__} has no test classes {sorted(unknown)}")
    for attr, cls in classes.items():
        if attr not in excluded:
            ns[attr] = cls
    return module
