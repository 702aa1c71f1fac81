"""Fuzz the inspection protocol: garbage, nothing, huge lines, half-closed and dribbled requests.

Several clients at once hit a real observed child process; afterwards it must
still answer correctly, be alive, and have written one audit line per
connection.
"""

from __future__ import annotations

import json
import random
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from observe_docs import ps_doc
from observed_child import child_env, run_cli, start_child

pytestmark = pytest.mark.timeout(180)

#: The child's request timeout, short so that idle clients cost little.
REQUEST_TIMEOUT = 0.3
#: Bound on any one exchange from the client's side (the server's own bounds are far lower).
CLIENT_TIMEOUT = 10.0
ITERATIONS = 320
CLIENTS = 4

UNKNOWN = re.compile(rb"error (unknown|malformed) request.*\n")
TIMED_OUT = b"error no request line within 0.3 s; closing\n"
TOO_LONG = b"error request line over 256 bytes\n"


def _connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CLIENT_TIMEOUT)
    sock.connect(path)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except ConnectionResetError:
        pass  # the server closed with some of our bytes unread
    return answer


def _send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server stopped reading, as it should past the limit


def garbage(path: str, rng: random.Random, pid: int) -> None:
    data = rng.randbytes(rng.randrange(1, 200)).replace(b"\n", b"")
    if not data.strip():
        data = b"\x00"
    with _connect(path) as sock:
        _send(sock, data + rng.choice([b"\n", b"\r\n", b""]))
        sock.shutdown(socket.SHUT_WR)
        answer = _read_all(sock)
    assert UNKNOWN.fullmatch(answer), (data, answer)


def printable_garbage(path: str, rng: random.Random, pid: int) -> None:
    word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_ ") for _ in range(rng.randrange(1, 30)))
    if word.strip() in ("ps", "top", "dump", "incidents", "metrics", ""):
        word = "zz"
    with _connect(path) as sock:
        _send(sock, word.encode() + b"\n")
        answer = _read_all(sock)
    assert UNKNOWN.fullmatch(answer), (word, answer)


def nothing(path: str, rng: random.Random, pid: int) -> None:
    with _connect(path) as sock:
        if rng.random() < 0.5:
            sock.shutdown(socket.SHUT_WR)
            assert _read_all(sock) == b"error empty request\n"


def abort(path: str, rng: random.Random, pid: int) -> None:
    """Close with a reset (SO_LINGER 0), after sending part of a request or none."""
    sock = _connect(path)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    if rng.random() < 0.5:
        _send(sock, b"p")
    sock.close()


def idle(path: str, rng: random.Random, pid: int) -> None:
    with _connect(path) as sock:
        if rng.random() < 0.5:
            _send(sock, b"ps")  # a line that never ends
        assert _read_all(sock) == TIMED_OUT


def dribble(path: str, rng: random.Random, pid: int) -> None:
    """One byte at a time, never a newline: the deadline is for the whole line."""
    with _connect(path) as sock:
        started = time.monotonic()
        sock.setblocking(False)
        answer = b""
        while time.monotonic() - started < CLIENT_TIMEOUT:
            try:
                sock.send(b"x")
                answer += sock.recv(65536)
                break
            except BlockingIOError:
                time.sleep(0.02)
            except (BrokenPipeError, ConnectionResetError):
                break
        sock.settimeout(CLIENT_TIMEOUT)
        answer += _read_all(sock)
    assert answer == TIMED_OUT


def huge(path: str, rng: random.Random, pid: int) -> None:
    line = b"a" * rng.choice([257, 4096, 1 << 20]) + rng.choice([b"\n", b""])
    with _connect(path) as sock:
        _send(sock, line)
        answer = _read_all(sock)
    assert answer == TOO_LONG


def valid(path: str, rng: random.Random, pid: int) -> None:
    request = b"ps\n"
    with _connect(path) as sock:
        cut = rng.randrange(0, len(request))
        _send(sock, request[:cut])
        time.sleep(rng.random() * 0.05)
        _send(sock, request[cut:])
        answer = _read_all(sock)
    header, _, body = answer.partition(b"\n")
    assert header == b"ok %d" % len(body)
    assert json.loads(body) == ps_doc(pid)


def unread(path: str, rng: random.Random, pid: int) -> None:
    """Ask, then leave without reading the answer."""
    with _connect(path) as sock:
        _send(sock, b"ps\n")


KINDS: list[tuple[Callable[[str, random.Random, int], None], float]] = [
    (garbage, 30),
    (printable_garbage, 15),
    (nothing, 10),
    (abort, 10),
    (huge, 10),
    (valid, 15),
    (unread, 6),
    (idle, 2),
    (dribble, 2),
]


def test_fuzzed_clients_leave_the_server_serving(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    child = start_child(tmp_path / "child.log", "--request-timeout", str(REQUEST_TIMEOUT), xdg=xdg)
    failures: list[BaseException] = []
    done: list[str] = []

    def client(seed: int) -> None:
        rng = random.Random(seed)
        kinds, weights = zip(*KINDS, strict=True)
        try:
            for _ in range(ITERATIONS // CLIENTS):
                kind = rng.choices(kinds, weights)[0]
                kind(child.path, rng, child.pid)
                done.append(kind.__name__)
        except BaseException as exc:
            failures.append(exc)

    try:
        threads = [threading.Thread(target=client, args=(seed,)) for seed in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(150)
        assert not any(thread.is_alive() for thread in threads), "a fuzzing client hung"
        if failures:
            raise failures[0]
        assert len(done) == ITERATIONS
        assert {"garbage", "huge", "valid", "idle", "dribble", "abort"} <= set(done)

        # Still serving, correctly, and alive.
        result = run_cli("ps", str(child.pid), "--json", env=child_env(xdg))
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == ps_doc(child.pid)
        assert child.proc.poll() is None
    finally:
        log = child.stop()
    audit = re.findall(
        r"^corun.observe INFO inspect: peer pid=\d+ uid=\d+ .* bytes=\d+ ms=[\d.]+ held_ms=[\d.]+$",
        log,
        re.M,
    )
    assert len(audit) == ITERATIONS + 1
    assert "Traceback" not in log
    assert child.proc.stdout is not None
    assert child.proc.stdout.read() == "closed\n"  # and its server closed cleanly
