"""Helpers for tests that run a server in a child process (nginx, proxy.py)."""

from __future__ import annotations

import socket
import subprocess
import time


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_listening(
    host: str, port: int, child: subprocess.Popen[bytes], *, timeout: float = 30.0
) -> bool:
    """Wait until ``host:port`` accepts a connection; False if ``child`` exited or time ran out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return True
        except OSError:
            pass
        if child.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.02)


__all__ = ["free_port", "wait_listening"]
