"""The inspection socket's security: its directory and modes, the peer check, bounded errors.

The server runs in this process where the test needs to look at it closely,
and in a child process (as ``nobody``, when the tests run as root) where a
second user must be involved.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import pwd
import re
import shutil
import socket
import stat
import struct
import subprocess
import tempfile
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from observed_child import (
    TIMEOUT,
    child_env,
    one_line_error,
    python_for,
    run_cli,
    start_child,
    wait_for,
)

from corun.observe import client
from corun.observe.protocol import UnsafeDirectoryError, default_directory
from corun.observe.server import InspectServer

pytestmark = pytest.mark.timeout(120)

IS_ROOT = os.geteuid() == 0
NEEDS_ROOT = "needs root: it makes files and processes of other users (nobody, daemon)"

HANDLERS: dict[str, Callable[[], str]] = {"ps": lambda: '{"pid": 1}', "metrics": lambda: "m 1\n"}


def ask(path: str, data: bytes, *, half_close: bool = False) -> bytes:
    """Connect to ``path``, send ``data``, return everything the server sends back."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT)
        sock.connect(path)
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., InspectServer]]:
    """Start InspectServers in this process; all are closed after the test."""
    started: list[InspectServer] = []

    def start(
        handlers: dict[str, Callable[[], str]] | None = None, **options: object
    ) -> InspectServer:
        options.setdefault("directory", str(tmp_path / "corun"))
        server = InspectServer(HANDLERS if handlers is None else handlers, **options)  # type: ignore[arg-type]
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.close()


# ---------------------------------------------------------------- directory and modes


def test_the_directory_is_0700_and_the_socket_0600_whatever_the_umask(
    serve: Callable[..., InspectServer], tmp_path: Path
) -> None:
    previous = os.umask(0)
    try:
        server = serve()
    finally:
        os.umask(previous)
    directory = tmp_path / "corun"
    assert server.path == str(directory / f"{os.getpid()}.sock")
    dir_info = os.lstat(directory)
    sock_info = os.lstat(server.path)
    assert stat.S_ISDIR(dir_info.st_mode)
    assert stat.S_IMODE(dir_info.st_mode) == 0o700
    assert stat.S_ISSOCK(sock_info.st_mode)
    assert stat.S_IMODE(sock_info.st_mode) == 0o600
    assert dir_info.st_uid == sock_info.st_uid == os.geteuid()
    assert ask(server.path, b"ps\n") == b'ok 10\n{"pid": 1}'


def test_close_removes_the_socket_and_may_be_called_twice(
    serve: Callable[..., InspectServer],
) -> None:
    server = serve()
    assert server.path is not None
    path = server.path
    server.close()
    assert not os.path.exists(path)
    server.close()
    with pytest.raises(RuntimeError, match="starts once"):
        server.start()


def test_close_leaves_a_socket_that_replaced_ours(
    serve: Callable[..., InspectServer], tmp_path: Path
) -> None:
    server = serve()
    assert server.path is not None
    os.unlink(server.path)
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(server.path)
        server.close()
        assert stat.S_ISSOCK(os.lstat(server.path).st_mode)


def test_the_default_directory() -> None:
    uid = os.geteuid()
    runtime = tempfile.mkdtemp()
    try:
        assert default_directory({"XDG_RUNTIME_DIR": runtime}, uid) == f"{runtime}/corun"
        assert default_directory({}, uid) == f"/tmp/corun-{uid}"
        # Not ours, relative, or not a directory: of no use.
        assert default_directory({"XDG_RUNTIME_DIR": runtime}, uid + 1) == f"/tmp/corun-{uid + 1}"
        assert default_directory({"XDG_RUNTIME_DIR": "run/user"}, uid) == f"/tmp/corun-{uid}"
        file = Path(runtime) / "file"
        file.write_text("")
        assert default_directory({"XDG_RUNTIME_DIR": str(file)}, uid) == f"/tmp/corun-{uid}"
    finally:
        shutil.rmtree(runtime)


def test_start_uses_the_default_directory(
    serve: Callable[..., InspectServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    server = serve(directory=None)
    assert server.path == str(tmp_path / "corun" / f"{os.getpid()}.sock")
    # The client finds it the same way.
    assert client.request(os.getpid(), "metrics") == "m 1\n"


@pytest.mark.parametrize("mode", [0o750, 0o705, 0o701, 0o770, 0o777, 0o1777])
def test_a_directory_open_to_others_is_refused(
    serve: Callable[..., InspectServer], tmp_path: Path, mode: int
) -> None:
    directory = tmp_path / "corun"
    directory.mkdir()
    directory.chmod(mode)
    with pytest.raises(UnsafeDirectoryError, match=f"has mode {mode:04o}.*must be 0700"):
        serve()
    assert list(directory.iterdir()) == []


def test_a_symlinked_directory_is_refused(
    serve: Callable[..., InspectServer], tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "corun").symlink_to(target)
    with pytest.raises(UnsafeDirectoryError, match="is a symlink"):
        serve()
    assert list(target.iterdir()) == []


def test_a_file_in_place_of_the_directory_is_refused(
    serve: Callable[..., InspectServer], tmp_path: Path
) -> None:
    (tmp_path / "corun").write_text("")
    with pytest.raises(UnsafeDirectoryError, match="is not a directory"):
        serve()


@pytest.mark.skipif(not IS_ROOT, reason=NEEDS_ROOT)
def test_a_directory_owned_by_someone_else_is_refused(
    serve: Callable[..., InspectServer], tmp_path: Path
) -> None:
    nobody = pwd.getpwnam("nobody")
    directory = tmp_path / "corun"
    directory.mkdir(mode=0o700)
    os.chown(directory, nobody.pw_uid, nobody.pw_gid)
    with pytest.raises(UnsafeDirectoryError, match=f"owned by uid {nobody.pw_uid}, not 0"):
        serve()
    assert list(directory.iterdir()) == []


def test_a_missing_parent_is_not_created(
    serve: Callable[..., InspectServer], tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError):
        serve(directory=str(tmp_path / "missing" / "corun"))
    assert not (tmp_path / "missing").exists()


# ---------------------------------------------------------------- the socket file


def test_a_stale_socket_of_a_dead_process_is_replaced(
    serve: Callable[..., InspectServer], tmp_path: Path
) -> None:
    directory = tmp_path / "corun"
    directory.mkdir(mode=0o700)
    path = directory / f"{os.getpid()}.sock"
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(path))  # bound, never listening, then closed: what a killed process leaves
    with pytest.raises(ConnectionRefusedError):
        ask(str(path), b"ps\n")
    server = serve()
    assert server.path == str(path)
    assert ask(str(path), b"ps\n").startswith(b"ok ")


def test_a_live_socket_is_not_taken_over(serve: Callable[..., InspectServer]) -> None:
    first = serve()
    with pytest.raises(OSError, match="a live process serves this socket") as raised:
        serve()
    assert raised.value.errno == errno.EADDRINUSE
    assert first.path is not None
    assert ask(first.path, b"metrics\n") == b"ok 4\nm 1\n"


def test_a_file_that_is_not_a_socket_is_left_alone(
    serve: Callable[..., InspectServer], tmp_path: Path
) -> None:
    directory = tmp_path / "corun"
    directory.mkdir(mode=0o700)
    path = directory / f"{os.getpid()}.sock"
    path.write_text("precious")
    with pytest.raises(FileExistsError, match="not a socket"):
        serve()
    assert path.read_text() == "precious"


# ---------------------------------------------------------------- answers and audit


def test_each_connection_leaves_one_audit_line(
    serve: Callable[..., InspectServer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="corun")
    server = serve()
    assert server.path is not None
    ask(server.path, b"ps\n")
    ask(server.path, b"nope\n")
    server.close()  # the thread has written its lines once it has stopped
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("inspect: peer")]
    me = f"pid={os.getpid()} uid={os.geteuid()}"
    assert len(lines) == 2
    assert re.fullmatch(
        rf"inspect: peer {me} request=ps outcome=ok bytes=16 ms=\d+\.\d held_ms=\d+\.\d", lines[0]
    )
    assert re.fullmatch(
        rf"inspect: peer {me} request=nope outcome=unknown request bytes=\d+ ms=\d+\.\d "
        r"held_ms=\d+\.\d",
        lines[1],
    )


def test_an_answer_in_many_pieces_arrives_whole_and_in_order(
    serve: Callable[..., InspectServer],
) -> None:
    # Pieces of odd sizes, more of them than one sendmsg() takes, and more
    # bytes than the socket buffers hold: partial sends split pieces.
    pieces = [chr(ord("a") + n % 26) * (1_000 + 7_919 * n % 40_000) for n in range(300)]
    server = serve({"many": lambda: pieces})
    assert server.path is not None
    body = "".join(pieces).encode()
    assert len(body) > 4_000_000
    assert ask(server.path, b"many\n") == b"ok %d\n" % len(body) + body


def test_the_server_pauses_for_the_loop_before_it_answers_and_while_it_sends(
    serve: Callable[..., InspectServer],
) -> None:
    # What happened, in order: "pause" for each pause, "answer" when the handler ran.
    happened: list[str] = []
    piece = b"x" * 16384
    handlers = {
        "big": lambda: happened.append("answer") or [piece] * 256,  # 4 MiB
    }
    server = serve(handlers, pause=lambda: happened.append("pause"))
    assert server.path is not None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT)
        sock.connect(server.path)
        sock.sendall(b"big\n")
        received = 0
        # A slow reader: the answer takes many sends, each after a wait.
        while chunk := sock.recv(65536):
            received += len(chunk)
            time.sleep(0.005)
    assert received == len(b"ok %d\n" % (256 * 16384)) + 256 * 16384
    # Once before the answer is made (the loop has waited since the client
    # came), and again and again while it goes out.
    assert happened[:2] == ["pause", "answer"]
    assert happened.count("answer") == 1
    assert happened[2:].count("pause") >= 5


def test_error_answers(
    serve: Callable[..., InspectServer], caplog: pytest.LogCaptureFixture
) -> None:
    def boom() -> str:
        raise RuntimeError("broke\nover two lines")

    handlers: dict[str, Callable[[], str]] = {
        "ps": lambda: "{}",
        "boom": boom,
        "big": lambda: "é" * 6,
        "notstr": lambda: b"x",  # type: ignore[dict-item,return-value]
        "pieces": lambda: ["{", '"a":1', "}"],  # type: ignore[dict-item,return-value]
        "bytepieces": lambda: [b"{", b'"a":1', b"}"],  # type: ignore[dict-item,return-value]
        "badpiece": lambda: ["{", 1, "}"],  # type: ignore[dict-item,return-value,list-item]
        "bigpieces": lambda: ["é" * 3, "é" * 3],  # type: ignore[dict-item,return-value]
    }
    server = serve(handlers, max_answer=11)
    assert server.path is not None
    assert (
        ask(server.path, b"top\n")
        == b"error unknown request 'top'; known: badpiece, big, bigpieces, boom, bytepieces, notstr, "
        b"pieces, ps\n"
    )
    assert ask(server.path, b"boom\n") == (
        b"error the boom handler failed: RuntimeError: broke over two lines\n"
    )
    assert ask(server.path, b"big\n") == b"error the big answer is 12 bytes, over the limit of 11\n"
    assert ask(server.path, b"notstr\n") == (
        b"error the notstr handler failed: TypeError: returned bytes, not str\n"
    )
    # An answer in pieces is sent as one, its length their sum, and checked as one.
    assert ask(server.path, b"pieces\n") == b'ok 7\n{"a":1}'
    assert ask(server.path, b"bytepieces\n") == b'ok 7\n{"a":1}'  # encoded by the handler
    assert ask(server.path, b"badpiece\n") == (
        b"error the badpiece handler failed: TypeError: returned a piece of int, not str or bytes\n"
    )
    assert ask(server.path, b"bigpieces\n") == (
        b"error the bigpieces answer is 12 bytes, over the limit of 11\n"
    )
    assert ask(server.path, b" ps\r\n") == b"ok 2\n{}"
    # The end of the stream ends the line too; without it, the line is awaited.
    assert ask(server.path, b"ps", half_close=True) == b"ok 2\n{}"
    failures = [r for r in caplog.records if r.getMessage() == "inspect: the 'boom' handler failed"]
    assert len(failures) == 1
    assert failures[0].exc_info is not None


def test_the_client_reads_error_answers_as_one_line(
    serve: Callable[..., InspectServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    serve(directory=None)
    with pytest.raises(
        client.InspectError, match=r"^unknown request 'dump'; known: metrics, ps$"
    ) as raised:
        client.request(os.getpid(), "dump")
    assert raised.value.reason == "server"


# ---------------------------------------------------------------- in a child process


@pytest.fixture
def observed_child(tmp_path: Path) -> Iterator[tuple[int, Path, Path]]:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    child = start_child(tmp_path / "child.log", xdg=xdg)
    yield child.pid, xdg, Path(child.path)
    child.stop()


def _socket_inodes(pid: int) -> set[str]:
    fds = Path(f"/proc/{pid}/fd")
    links = (os.readlink(fd) for fd in fds.iterdir())
    return {link[len("socket:[") : -1] for link in links if link.startswith("socket:[")}


def _table_inodes(name: str) -> set[str]:
    path = Path("/proc/net") / name
    if not path.exists():
        return set()
    lines = path.read_text().splitlines()[1:]
    column = 6 if name == "unix" else 9
    return {line.split()[column] for line in lines if len(line.split()) > column}


def test_the_server_opens_no_network_socket(observed_child: tuple[int, Path, Path]) -> None:
    pid, xdg, _ = observed_child
    assert run_cli("ps", str(pid), "--json", env=child_env(xdg)).returncode == 0
    mine = _socket_inodes(pid)
    assert mine, "the child has no socket open"
    assert mine <= _table_inodes("unix")
    for table in ("tcp", "tcp6", "udp", "udp6", "raw", "raw6"):
        assert not mine & _table_inodes(table), table


def test_the_client_refuses_a_directory_opened_to_others(
    observed_child: tuple[int, Path, Path],
) -> None:
    pid, xdg, path = observed_child
    path.parent.chmod(0o755)
    line = one_line_error(run_cli("ps", str(pid), env=child_env(xdg)), "ps")
    assert (
        line
        == f"corun ps: socket directory {path.parent} has mode 0755, open to group or others (it must be 0700); refusing it"
    )


RAW_CLIENT = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(20)
sock.connect(sys.argv[1])
try:
    sock.sendall(sys.argv[2].encode() + b"\\n")
except (BrokenPipeError, ConnectionResetError):
    pass  # refused and closed before our request: the refusal is waiting
answer = b""
try:
    while chunk := sock.recv(65536):
        answer += chunk
except ConnectionResetError:
    pass  # the server closed with our request unread
sys.stdout.write(answer.decode())
"""


@pytest.mark.skipif(not IS_ROOT, reason=NEEDS_ROOT)
def test_a_client_of_another_uid_is_refused_by_the_peer_check() -> None:
    python_nobody = python_for("nobody")
    python_daemon = python_for("daemon")
    if python_nobody is None or python_daemon is None:
        pytest.skip(
            "no Python interpreter that both nobody and daemon may run and import corun with"
        )
    nobody = pwd.getpwnam("nobody")
    daemon = pwd.getpwnam("daemon")
    # Under /tmp, not pytest's tmp_path: that sits in a directory of mode 0700.
    base = Path(tempfile.mkdtemp(prefix="corun-peercred-"))
    try:
        base.chmod(0o711)
        xdg = base / "xdg"
        xdg.mkdir(mode=0o700)
        os.chown(xdg, nobody.pw_uid, nobody.pw_gid)
        child = start_child(base / "child.log", xdg=xdg, user="nobody", python=python_nobody)
        try:
            path = Path(child.path)
            assert path.parent == xdg / "corun"
            assert os.lstat(path).st_uid == nobody.pw_uid

            # Root may inspect nobody's process.
            as_root = run_cli("ps", str(child.pid), "--json")
            assert as_root.returncode == 0, as_root.stderr
            # daemon may not: the client says so at once.
            as_daemon = run_cli("ps", str(child.pid), user="daemon", python=python_daemon)
            assert one_line_error(as_daemon, "ps") == (
                f"corun ps: permission denied: process {child.pid} (it runs as uid "
                f"{nobody.pw_uid}) may be inspected only by its own user or root"
            )

            # Open the way through the filesystem, so that only the peer check stands.
            xdg.chmod(0o711)
            path.parent.chmod(0o711)
            path.chmod(0o666)
            raw = [python_daemon, "-c", RAW_CLIENT, str(path), "ps"]
            refused = subprocess.run(
                raw, user="daemon", cwd="/", capture_output=True, text=True, timeout=TIMEOUT
            )
            assert refused.returncode == 0, refused.stderr
            assert refused.stdout == (
                f"error permission denied: uid {daemon.pw_uid} may not inspect this process\n"
            )
            # The same way in, as nobody itself: answered. The refusal was the uid's.
            raw[0] = python_nobody
            answered = subprocess.run(
                raw, user="nobody", cwd="/", capture_output=True, text=True, timeout=TIMEOUT
            )
            assert answered.stdout.startswith("ok "), answered
        finally:
            log = child.stop()
        refusals = re.findall(
            rf"corun.observe WARNING inspect: peer pid=(\d+) uid={daemon.pw_uid} request=- "
            r"outcome=refused bytes=(\d+) ms=[\d.]+ held_ms=[\d.]+",
            log,
        )
        assert len(refusals) == 1, log
        assert int(refusals[0][1]) == len(refused.stdout)
        assert re.search(
            r"corun.observe INFO inspect: peer pid=\d+ uid=0 request=ps outcome=ok ", log
        )
        assert re.search(
            rf"corun.observe INFO inspect: peer pid=\d+ uid={nobody.pw_uid} request=ps outcome=ok ",
            log,
        )
    finally:
        shutil.rmtree(base)


# ---------------------------------------------------------------- slow clients


def test_a_client_that_does_not_take_its_answer_is_dropped(
    serve: Callable[..., InspectServer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="corun")
    big = "x" * (8 << 20)  # far more than the socket buffers hold
    server = serve({"big": lambda: big, "ps": lambda: "{}"}, answer_timeout=0.5)
    assert server.path is not None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stuck:
        stuck.connect(server.path)
        stuck.sendall(b"big\n")  # and never reads
        # The next client is served once the stuck one has had its answer_timeout.
        assert ask(server.path, b"ps\n") == b"ok 2\n{}"
    server.close()
    outcomes = [r.getMessage() for r in caplog.records if "request=big" in r.getMessage()]
    assert len(outcomes) == 1
    assert "outcome=ok, client too slow to take the answer" in outcomes[0]


def test_close_drops_a_connection_being_served(
    serve: Callable[..., InspectServer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="corun")
    server = serve(request_timeout=600.0)
    assert server.path is not None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as idle:
        idle.settimeout(TIMEOUT)
        idle.connect(server.path)
        idle.sendall(b"p")
        # Until the server has read the byte: SIOCOUTQ counts what the peer has not read.
        wait_for(lambda: struct.unpack("i", fcntl.ioctl(idle, termios.TIOCOUTQ, b"\0" * 4))[0] == 0)
        threads = [t for t in threading.enumerate() if t.name == "corun-inspect"]
        server.close()
        assert idle.recv(100) == b""
    assert not any(thread.is_alive() for thread in threads)
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "did not stop" in m]
    assert any("request=- outcome=?, server closing" in m for m in messages), messages


@contextlib.contextmanager
def _forked(action: Callable[[], object]) -> Iterator[None]:
    """A forked child that runs ``action``, then holds its fds until the block ends."""
    done_r, done_w = os.pipe()
    release_r, release_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(release_w)
            os.close(done_r)
            action()
            os.write(done_w, b"x")
            os.read(release_r, 1)  # until the parent closes its end
        finally:
            os._exit(0)
    os.close(done_w)
    os.close(release_r)
    try:
        assert os.read(done_r, 1) == b"x"
        yield
    finally:
        os.close(release_w)
        os.waitpid(pid, 0)
        os.close(done_r)


def test_a_forked_child_neither_stops_nor_holds_up_the_server(
    serve: Callable[..., InspectServer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="corun")
    server = serve()
    assert server.path is not None
    with _forked(server.close):
        # The child's close() left our server serving, and our socket in place.
        assert ask(server.path, b"metrics\n") == b"ok 4\nm 1\n"
    threads = [t for t in threading.enumerate() if t.name == "corun-inspect"]
    with _forked(lambda: None):
        # This child holds a copy of the pipe that wakes our thread: close() still stops it.
        server.close()
        assert not any(thread.is_alive() for thread in threads)
    assert not os.path.exists(server.path)
    assert not [r for r in caplog.records if "did not stop" in r.getMessage()]
