"""Fixtures for the runtime tests (the shared ones are in tests/conftest.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a path short enough for AF_UNIX (108 bytes)."""
    d = tempfile.mkdtemp(prefix="corun-", dir="/tmp")
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def payload_file(tmp_path: Path) -> tuple[Path, bytes]:
    data = os.urandom(3 * 1024 * 1024 + 123)
    path = tmp_path / "payload.bin"
    path.write_bytes(data)
    return path, data


# The modules whose tests run with blockbuster watching corun's own calls
# (issue: "a loop should never block"): any blocking call made from a corun
# frame on the loop's thread fails the test, as it would in anyio's and
# aiohttp's own suites, which run blockbuster.
_WATCHED_FOR_BLOCKING = {
    "test_sockets",
    "test_connect",
    "test_servers",
    "test_unix_sockets",
    "test_datagrams",
    "test_transports",
    "test_sendfile",
    "test_dns",
    "test_faults",
    "test_streams",
    "test_pipes",
    "test_subprocess",
    "test_tls",
    "test_aiohttp",
    "test_https_proxy",
}


@pytest.fixture(autouse=True)
def _no_blocking_calls(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.module.__name__.rsplit(".", 1)[-1] not in _WATCHED_FOR_BLOCKING:
        yield
        return
    from blockbuster import blockbuster_ctx

    # The engine's frames are left out: compiled, it has none, and in the pure
    # build its task step sits under every coroutine, which would make any
    # blocking call of the test's own code look like corun's.
    with blockbuster_ctx("corun", excluded_modules=["corun.runtime.engine"]) as bb:
        # Closing a Unix server removes its socket file at once, as asyncio's
        # _stop_serving does (which blockbuster itself allows).
        for name in ("os.stat", "os.unlink"):
            bb.functions[name].can_block_in(
                "corun/runtime/net/servers.py", "_remove_unix_socket_file"
            )
        yield
