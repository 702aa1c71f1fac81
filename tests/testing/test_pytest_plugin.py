"""corun.testing.pytest_plugin: a project's own pytest run, in a subprocess, on corun."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROJECT_TESTS = textwrap.dedent(
    """
    import asyncio, sys, unittest

    import pytest
    import pytest_asyncio

    import corun


    def on_corun():
        return isinstance(asyncio.get_running_loop(), corun.EventLoop)


    @pytest_asyncio.fixture
    async def fixture_on_corun():
        return on_corun()


    @pytest.mark.asyncio
    async def test_pytest_asyncio(fixture_on_corun):
        assert fixture_on_corun
        assert on_corun()


    @pytest.mark.anyio
    async def test_anyio():
        assert on_corun()


    if sys.version_info >= (3, 13):

        class TestCase(unittest.IsolatedAsyncioTestCase):
            async def test_isolated(self):
                assert on_corun()
    """
)


@pytest.mark.parametrize("loaded", [True, False], ids=["plugin", "without-plugin"])
def test_a_project_s_async_tests_run_on_corun_with_the_plugin(
    tmp_path: Path, child_env: dict[str, str], loaded: bool
) -> None:
    (tmp_path / "conftest.py").write_text(
        'pytest_plugins = ["corun.testing.pytest_plugin"]\n' if loaded else ""
    )
    (tmp_path / "test_project.py").write_text(PROJECT_TESTS)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=tmp_path,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    tests = 3 if sys.version_info >= (3, 13) else 2
    summary = result.stdout.strip().splitlines()[-1]
    if loaded:
        assert result.returncode == 0, result.stdout[-3000:]
        assert summary.startswith(f"{tests} passed"), summary
    else:  # the same tests fail on asyncio's loop: they can tell
        assert result.returncode == 1, result.stdout[-3000:]
        assert summary.startswith(f"{tests} failed"), summary
