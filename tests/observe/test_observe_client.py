"""The inspection client against peers that break the wire format, stall, or are not servers.

The peer is a real Unix socket server in a thread, at the place the client
looks for this process's socket, answering scripted bytes.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from observed_child import nonexistent_pid

from corun.observe import client
from corun.observe.protocol import MAX_ANSWER, socket_path

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def own_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where the client looks for this process's socket (the directory exists)."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    (tmp_path / "corun").mkdir(mode=0o700)
    return socket_path(str(tmp_path / "corun"), os.getpid())


@pytest.fixture
def peer(own_socket: str) -> Iterator[Callable[[bytes | None], None]]:
    """Serve this process's socket with a peer that answers given bytes (None: never)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(own_socket)
    listener.listen(1)
    answers: list[bytes | None] = []
    release = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(256)
            answer = answers[0]
            if answer is None:
                release.wait(30)
                return
            conn.sendall(answer)

    thread = threading.Thread(target=serve)

    def start(answer: bytes | None) -> None:
        answers.append(answer)
        thread.start()

    yield start
    release.set()
    thread.join(30)
    listener.close()


@pytest.mark.parametrize(
    ("answer", "reason", "message"),
    [
        (b"", "malformed", "the connection closed before an answer"),
        (b"hello\n", "malformed", "unexpected answer header 'hello'"),
        (b"ok\n", "malformed", "unexpected answer header 'ok'"),
        (b"ok -1\n", "malformed", "unexpected answer header 'ok -1'"),
        (b"x" * 2000, "malformed", "answer header longer than 1024 bytes"),
        (b"ok %d\n" % (MAX_ANSWER + 1), "malformed", f"over the {MAX_ANSWER} limit"),
        (b"ok 10\nabc", "malformed", "answer truncated: 3 of 10 bytes arrived"),
        (b"ok 2\nabcd", "malformed", "answer longer than its header's 2 bytes"),
        (b"ok 2\n\xff\xfe", "malformed", "answered text that is not UTF-8"),
        (b"error boom\n", "server", "boom"),
        (b"error permission denied: go away\n", "permission", "permission denied: go away"),
    ],
)
def test_a_broken_answer_is_a_one_line_error(
    peer: Callable[[bytes | None], None], answer: bytes, reason: str, message: str
) -> None:
    peer(answer)
    with pytest.raises(client.InspectError) as raised:
        client.request(os.getpid(), "ps", timeout=10)
    assert raised.value.reason == reason
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_good_answer(peer: Callable[[bytes | None], None]) -> None:
    peer("ok 6\nnaïve".encode())
    assert client.request(os.getpid(), "ps", timeout=10) == "naïve"


def test_a_peer_that_never_answers_times_out(peer: Callable[[bytes | None], None]) -> None:
    peer(None)
    with pytest.raises(client.InspectError, match=r"did not answer 'ps' within 0.3 s") as raised:
        client.request(os.getpid(), "ps", timeout=0.3)
    assert raised.value.reason == "timeout"


def test_a_socket_path_that_is_no_socket_is_refused(own_socket: str) -> None:
    Path(own_socket).write_text("")
    with pytest.raises(client.InspectError, match="is not a socket of uid") as raised:
        client.find_socket(os.getpid())
    assert raised.value.reason == "unsafe"


def test_a_stale_socket_says_observation_is_off(own_socket: str) -> None:
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(own_socket)
    with pytest.raises(client.InspectError, match="does not serve its socket") as raised:
        client.request(os.getpid(), "ps")
    assert raised.value.reason == "not-observed"


def test_a_socket_older_than_the_process_is_an_earlier_processes(own_socket: str) -> None:
    # A process killed before it could unlink its socket, whose pid came round again.
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(own_socket)
    before_boot = time.time() - time.monotonic() - 3600
    os.utime(own_socket, (before_boot, before_boot))
    with pytest.raises(client.InspectError, match="does not run with observation on") as raised:
        client.request(os.getpid(), "ps")
    assert raised.value.reason == "not-observed"


@pytest.mark.parametrize("pid", [0, -1, nonexistent_pid()])
def test_no_such_process(pid: int) -> None:
    with pytest.raises(client.InspectError, match=f"^no process {pid}$") as raised:
        client.request(pid, "ps")
    assert raised.value.reason == "no-process"
