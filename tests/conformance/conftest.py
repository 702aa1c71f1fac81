"""pytest glue for the CPython asyncio conformance suites (see _harness.py).

* installs the event loop policy under test around every conformance test;
* applies ``exclusions.py`` (xfail strict / skip, with the reason);
* the per-module summary table at the end of the run is ``summary.py``'s,
  registered by tests/conftest.py (under pytest-xdist, the process that
  prints it collects nothing, so never loads this file).
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from . import _harness
from .exclusions import EXCLUSIONS, SKIP_PREFIX


def pytest_configure(config: pytest.Config) -> None:
    _harness.loop_kind()  # validates $CORUN_CONFORMANCE_LOOP early


# --------------------------------------------------------------------------- policy


@pytest.fixture(scope="session", autouse=True)
def _conformance_loop_is_under_test() -> None:
    """Fail loudly if the policy does not produce the loop we claim to test."""
    impl = _harness.impl()
    if impl.loop_class is None:
        return
    loop = impl.policy_factory().new_event_loop()
    try:
        if not isinstance(loop, impl.loop_class):
            pytest.fail(
                f"{impl.policy_factory.__qualname__}().new_event_loop() returned "
                f"{type(loop).__qualname__}, not {impl.loop_class.__qualname__}",
                pytrace=False,
            )
    finally:
        loop.close()


@pytest.fixture(autouse=True)
def _conformance_event_loop_policy() -> Iterator[None]:
    """Every loop the CPython test asks the policy for is the loop under test.

    The CPython modules' ``tearDownModule`` (which resets the policy) is not
    collected; restoring the previous policy here does its job per test.
    """
    previous = getattr(asyncio.events, "_event_loop_policy", None)
    asyncio.set_event_loop_policy(_harness.impl().policy_factory())
    try:
        yield
    finally:
        asyncio.set_event_loop_policy(previous)


# --------------------------------------------------------------------------- exclusions


def _cpython_module_of(item: pytest.Item) -> str | None:
    module = item.getparent(pytest.Module)
    if module is None:
        return None
    name = getattr(module.obj, _harness.MODULE_ATTR, None)
    return name if isinstance(name, str) else None


def _exclusion_for(item: pytest.Item, module_name: str) -> tuple[str, str] | None:
    class_name = item.parent.name if item.parent is not None else ""
    candidates = (
        item.nodeid,
        f"{module_name}::{class_name}::{item.name}",
        f"{module_name}::{class_name}",
        module_name,
    )
    for key in candidates:
        if key in EXCLUSIONS:
            return key, EXCLUSIONS[key]
    return None


def _check_exclusion_keys(seen_modules: dict[str, Any], used: set[str]) -> None:
    """Warn about exclusion keys that name nothing in a collected module."""
    for key in EXCLUSIONS:
        if key in used or "/" in key or ".py" in key:
            continue
        module_name, _, rest = key.partition("::")
        module_obj = seen_modules.get(module_name)
        if module_obj is None:
            continue  # module not collected in this run (or not importable)
        class_name, _, method = rest.partition("::")
        cls = getattr(module_obj, class_name, None) if class_name else module_obj
        if cls is None or (method and not callable(getattr(cls, method, None))):
            warnings.warn(
                pytest.PytestWarning(f"conformance exclusion {key!r} matches no test"),
                stacklevel=1,
            )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    apply_exclusions = _harness.loop_kind() == "corun"
    seen_modules: dict[str, Any] = {}
    used: set[str] = set()
    for item in items:
        module_name = _cpython_module_of(item)
        if module_name is None:
            continue
        parent = item.getparent(pytest.Module)
        if parent is not None:
            seen_modules[module_name] = parent.obj
        if not apply_exclusions:
            continue
        found = _exclusion_for(item, module_name)
        if found is None:
            continue
        key, reason = found
        used.add(key)
        if reason.startswith(SKIP_PREFIX):
            item.add_marker(pytest.mark.skip(reason=f"[corun] {reason[len(SKIP_PREFIX) :]}"))
        else:
            item.add_marker(pytest.mark.xfail(reason=f"[corun] {reason}", strict=True))
    if apply_exclusions:
        _check_exclusion_keys(seen_modules, used)
