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
