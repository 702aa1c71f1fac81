"""subprocess_exec / subprocess_shell and asyncio.create_subprocess_*, on every loop.

Real children (``sys.executable -c ...``). The loop fixture's teardown checks
for leaked fds (pipes, pidfds) and unexpected exception-handler calls.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

PY = sys.executable
PIPE = asyncio.subprocess.PIPE
DEVNULL = asyncio.subprocess.DEVNULL
STDOUT = asyncio.subprocess.STDOUT

CAT = [PY, "-c", "import shutil, sys; shutil.copyfileobj(sys.stdin.buffer, sys.stdout.buffer)"]
SLEEP = [PY, "-c", "import time; time.sleep(60)"]
# Prints "ready" once it is up, so a signal cannot arrive before the interpreter is.
SLEEP_READY = [
    PY,
    "-c",
    "import sys, time; print('ready', flush=True); time.sleep(60)",
]


def run(loop, coro, timeout=15.0):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


class RecordingProtocol(asyncio.SubprocessProtocol):
    """Records the protocol callbacks in order (pipe data once per fd)."""

    def __init__(self, loop):
        self.events = []
        self.data = {1: bytearray(), 2: bytearray()}
        self.transport = None
        self.done = loop.create_future()
        self.got_stdout = loop.create_future()

    def connection_made(self, transport):
        self.transport = transport
        self.events.append("made")

    def pipe_data_received(self, fd, data):
        if ("data", fd) not in self.events:
            self.events.append(("data", fd))
        self.data[fd] += data
        if fd == 1 and not self.got_stdout.done():
            self.got_stdout.set_result(None)

    def pipe_connection_lost(self, fd, exc):
        self.events.append(("pipe_lost", fd, exc))

    def process_exited(self):
        self.events.append(("exited", self.transport.get_returncode()))

    def connection_lost(self, exc):
        self.events.append(("lost", exc))
        self.done.set_result(None)


# ---------------------------------------------------------------- protocol level


def test_protocol_callback_order(loop):
    proto = RecordingProtocol(loop)
    code = "import sys; sys.stdout.write('out'); sys.stderr.write('err'); sys.exit(3)"

    async def main():
        transport, p = await loop.subprocess_exec(lambda: proto, PY, "-c", code)
        assert p is proto
        assert proto.events == ["made"]  # before subprocess_exec returned
        assert transport.get_pid() > 0
        assert transport.get_returncode() is None
        assert isinstance(transport.get_extra_info("subprocess"), subprocess.Popen)
        assert transport.get_extra_info("subprocess").pid == transport.get_pid()
        for fd in (0, 1, 2):
            assert transport.get_pipe_transport(fd) is not None
        assert transport.get_pipe_transport(3) is None
        await proto.done
        return transport

    transport = run(loop, main())
    events = proto.events
    # connection_made first, connection_lost last; process_exited and the
    # pipes' events in between, in whatever order the kernel reports them.
    assert events[0] == "made"
    assert events[-1] == ("lost", None)
    assert events.count(("exited", 3)) == 1
    middle = [e for e in events[1:-1] if e[0] != "exited"]
    assert sorted(e for e in middle if e[0] == "pipe_lost") == [
        ("pipe_lost", 0, None),
        ("pipe_lost", 1, None),
        ("pipe_lost", 2, None),
    ]
    assert middle.index(("data", 1)) < middle.index(("pipe_lost", 1, None))
    assert middle.index(("data", 2)) < middle.index(("pipe_lost", 2, None))
    assert proto.data == {1: b"out", 2: b"err"}
    assert transport.get_returncode() == 3
    # After connection_lost the process is gone for good.
    with pytest.raises(ProcessLookupError):
        transport.kill()
    with pytest.raises(ProcessLookupError):
        transport.terminate()
    with pytest.raises(ProcessLookupError):
        transport.send_signal(signal.SIGTERM)
    transport.close()


def test_connection_lost_waits_for_pipes_after_exit(loop):
    # The child exits at once but a grandchild keeps stdout open for a while:
    # process_exited comes first, connection_lost only after the pipe closes.
    proto = RecordingProtocol(loop)
    code = (
        "import subprocess, sys;"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(0.3)'])"
    )

    async def main():
        transport, _ = await loop.subprocess_exec(
            lambda: proto, PY, "-c", code, stdin=DEVNULL, stderr=DEVNULL
        )
        await proto.done
        transport.close()

    run(loop, main())
    assert proto.events == [
        "made",
        ("exited", 0),
        ("pipe_lost", 1, None),
        ("lost", None),
    ]


def test_shell(loop):
    proto = RecordingProtocol(loop)

    async def main():
        transport, _ = await loop.subprocess_shell(
            lambda: proto, "echo hi; echo there >&2; exit 7", stdin=None
        )
        await proto.done
        transport.close()

    run(loop, main())
    assert proto.data == {1: b"hi\n", 2: b"there\n"}
    assert ("exited", 7) in proto.events
    assert proto.events[-1] == ("lost", None)


def test_close_kills_running_child(loop):
    proto = RecordingProtocol(loop)

    async def main():
        transport, _ = await loop.subprocess_exec(lambda: proto, *SLEEP)
        transport.close()
        assert transport.is_closing()
        transport.close()  # no-op
        await proto.done
        return transport

    transport = run(loop, main())
    assert ("exited", -signal.SIGKILL) in proto.events
    assert transport.get_returncode() == -signal.SIGKILL


def test_close_after_exit_does_not_kill(loop):
    proto = RecordingProtocol(loop)

    async def main():
        transport, _ = await loop.subprocess_exec(lambda: proto, PY, "-c", "pass")
        await proto.done
        transport.close()
        return transport

    transport = run(loop, main())
    assert transport.get_returncode() == 0


def children() -> set[int]:
    """This process's children, zombies included (from /proc)."""
    pids: set[int] = set()
    for path in Path("/proc/self/task").glob("*/children"):
        try:
            text = path.read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended since the listing (corun's spawning thread does)
        pids.update(int(pid) for pid in text.split())
    return pids


def test_cancelled_subprocess_exec_kills_the_child(loop):
    pids = []

    class Proto(asyncio.SubprocessProtocol):
        def connection_made(self, transport):
            pids.append(transport.get_pid())

    async def main():
        task = asyncio.ensure_future(loop.subprocess_exec(Proto, *SLEEP))
        # Spawned (on corun, by a thread of its own), and the protocol is not
        # connected yet: connection_made is scheduled after the pipes connect.
        while not pids and not children():
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    before = children()
    run(loop, main())
    # When CancelledError arrives, the child is gone: not left running, nor
    # as a zombie (which would still be listed as a child).
    assert children() == before
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_exec_cancelled_while_spawning_leaves_no_child(loop):
    async def main():
        task = asyncio.ensure_future(loop.subprocess_exec(asyncio.SubprocessProtocol, *SLEEP))
        await asyncio.sleep(0)  # corun: the spawn thread may still be forking
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    before = children()
    run(loop, main())
    assert children() == before


def test_unclosed_transport_warns(loop):
    proto = RecordingProtocol(loop)

    async def main():
        await loop.subprocess_exec(
            lambda: proto, PY, "-c", "pass", stdin=DEVNULL, stdout=DEVNULL, stderr=DEVNULL
        )
        await proto.done

    run(loop, main())
    with pytest.warns(ResourceWarning, match="unclosed transport") as record:
        proto.transport = None
        # asyncio's waiter thread may hold the transport a moment longer.
        for _ in range(200):
            gc.collect()
            if record:
                break
            time.sleep(0.005)


def test_pipe_transports_and_redirections(loop):
    proto = RecordingProtocol(loop)
    code = "import sys; print('to out'); print('to err', file=sys.stderr)"

    async def main():
        transport, _ = await loop.subprocess_exec(
            lambda: proto, PY, "-c", code, stdin=DEVNULL, stdout=PIPE, stderr=STDOUT
        )
        assert transport.get_pipe_transport(0) is None
        assert transport.get_pipe_transport(1) is not None
        assert transport.get_pipe_transport(2) is None
        await proto.done
        transport.close()

    run(loop, main())
    assert sorted(proto.data[1].splitlines()) == [b"to err", b"to out"]


def test_debug_mode_logging(loop, caplog):
    loop.set_debug(True)
    proto = RecordingProtocol(loop)

    async def main():
        transport, _ = await loop.subprocess_exec(lambda: proto, *SLEEP_READY)
        await proto.got_stdout
        assert "running" in repr(transport)
        assert f"pid={transport.get_pid()}" in repr(transport)
        transport.close()
        await proto.done
        assert f"returncode={-signal.SIGKILL}" in repr(transport)

    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        run(loop, main())
    text = caplog.text
    assert "execute program" in text
    assert "Close running child process: kill" in text
    assert f"exited with return code {-signal.SIGKILL}" in text


# ---------------------------------------------------------------- asyncio.subprocess


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("pass", 0),
        ("import sys; sys.exit(42)", 42),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL),
        ("raise SystemExit('boom')", 1),
    ],
)
def test_exit_codes(loop, code, expected):
    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", code, stderr=DEVNULL)
        assert proc.returncode is None
        assert await proc.wait() == expected
        assert proc.returncode == expected
        assert await proc.wait() == expected  # again: returns at once

    run(loop, main())


def test_communicate_large_data(loop):
    data = os.urandom(4 * 1024 * 1024)

    async def main():
        proc = await asyncio.create_subprocess_exec(*CAT, stdin=PIPE, stdout=PIPE)
        out, err = await proc.communicate(data)
        assert err is None
        assert out == data
        assert proc.returncode == 0

    run(loop, main())


def test_large_output_on_both_pipes(loop):
    code = (
        "import sys; sys.stdout.buffer.write(b'o' * 3_000_000); "
        "sys.stderr.buffer.write(b'e' * 3_000_000)"
    )

    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", code, stdout=PIPE, stderr=PIPE)
        out, err = await proc.communicate()
        assert (len(out), len(err)) == (3_000_000, 3_000_000)
        assert out == b"o" * 3_000_000 and err == b"e" * 3_000_000

    run(loop, main())


def test_stdin_writes_with_drain(loop):
    code = "import sys; n = len(sys.stdin.buffer.read()); print(n)"
    chunk = b"x" * 65536

    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", code, stdin=PIPE, stdout=PIPE)
        for _ in range(64):
            proc.stdin.write(chunk)
            await proc.stdin.drain()
        proc.stdin.close()
        await proc.stdin.wait_closed()
        out = await proc.stdout.read()
        assert int(out) == 64 * 65536
        assert await proc.wait() == 0

    run(loop, main())


def test_interactive_line_by_line(loop):
    code = "import sys\nfor line in sys.stdin:\n    print(line.strip().upper(), flush=True)"

    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", code, stdin=PIPE, stdout=PIPE)
        for word in (b"alpha", b"beta", b"gamma"):
            proc.stdin.write(word + b"\n")
            await proc.stdin.drain()
            assert await proc.stdout.readline() == word.upper() + b"\n"
        proc.stdin.close()
        assert await proc.wait() == 0

    run(loop, main())


def test_twenty_concurrent_children(loop):
    async def one(i):
        proc = await asyncio.create_subprocess_exec(
            PY, "-c", f"import sys; print({i}); sys.exit({i % 5})", stdout=PIPE
        )
        out, _ = await proc.communicate()
        return int(out), proc.returncode

    async def main():
        return await asyncio.gather(*(one(i) for i in range(20)))

    assert run(loop, main(), timeout=30) == [(i, i % 5) for i in range(20)]


def test_shell_communicate(loop):
    async def main():
        proc = await asyncio.create_subprocess_shell(
            "read x; echo got:$x; exit 3", stdin=PIPE, stdout=PIPE
        )
        out, _ = await proc.communicate(b"hello\n")
        assert out == b"got:hello\n"
        assert proc.returncode == 3

    run(loop, main())


@pytest.mark.parametrize(
    ("method", "args", "expected"),
    [
        ("kill", (), -signal.SIGKILL),
        ("terminate", (), -signal.SIGTERM),
        # SIGUSR1, not SIGHUP: under nohup the child would inherit SIGHUP ignored.
        ("send_signal", (signal.SIGUSR1,), -signal.SIGUSR1),
    ],
)
def test_kill_terminate_send_signal(loop, method, args, expected):
    async def main():
        proc = await asyncio.create_subprocess_exec(*SLEEP_READY, stdout=PIPE)
        assert await proc.stdout.readline() == b"ready\n"
        getattr(proc, method)(*args)
        assert await proc.wait() == expected
        await proc.stdout.read()  # EOF
        for _ in range(5):
            await asyncio.sleep(0)  # let connection_lost run
        with pytest.raises(ProcessLookupError):
            getattr(proc, method)(*args)

    run(loop, main())


def test_stdin_devnull(loop):
    code = "import sys; print(repr(sys.stdin.read()))"

    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", code, stdin=DEVNULL, stdout=PIPE)
        assert proc.stdin is None
        out, _ = await proc.communicate()
        assert out == b"''\n"

    run(loop, main())


def test_stdout_devnull(loop):
    async def main():
        proc = await asyncio.create_subprocess_exec(
            PY,
            "-c",
            "print('lost'); import sys; print('kept', file=sys.stderr)",
            stdout=DEVNULL,
            stderr=PIPE,
        )
        assert proc.stdout is None
        out, err = await proc.communicate()
        assert out is None
        assert err == b"kept\n"

    run(loop, main())


def test_stderr_to_stdout(loop):
    code = "import sys; sys.stdout.write('a'); sys.stdout.flush(); sys.stderr.write('b')"

    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", code, stdout=PIPE, stderr=STDOUT)
        assert proc.stderr is None
        out, err = await proc.communicate()
        assert out == b"ab"
        assert err is None

    run(loop, main())


def test_read_stdout_after_exit(loop):
    code = "import sys; sys.stdout.buffer.write(b'x' * 500_000); sys.exit(1)"

    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", code, stdout=PIPE)
        await asyncio.sleep(0.2)  # the child writes, blocks on the full pipe
        data = await proc.stdout.read()
        assert len(data) == 500_000
        assert await proc.wait() == 1

    run(loop, main())


def test_cancel_wait_then_kill(loop):
    async def main():
        proc = await asyncio.create_subprocess_exec(*SLEEP)
        task = asyncio.ensure_future(proc.wait())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        proc.kill()
        assert await proc.wait() == -signal.SIGKILL

    run(loop, main())


def test_cancel_create_subprocess_exec(loop):
    async def main():
        task = asyncio.ensure_future(asyncio.create_subprocess_exec(*SLEEP))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(loop, main())


def test_path_like_program(loop):
    import pathlib

    async def main():
        proc = await asyncio.create_subprocess_exec(pathlib.Path(PY), "-c", "pass")
        assert await proc.wait() == 0

    run(loop, main())


# ---------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"universal_newlines": True}, "universal_newlines must be False"),
        ({"shell": True}, "shell must be False"),
        ({"bufsize": 4096}, "bufsize must be 0"),
        ({"text": True}, "text must be False"),
        ({"encoding": "utf-8"}, "encoding must be None"),
        ({"errors": "strict"}, "errors must be None"),
    ],
)
def test_subprocess_exec_bad_arguments(loop, kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        run(loop, loop.subprocess_exec(asyncio.SubprocessProtocol, PY, "-c", "pass", **kwargs))


@pytest.mark.parametrize(
    ("cmd", "kwargs", "message"),
    [
        (["ls", "-l"], {}, "cmd must be a string"),
        (123, {}, "cmd must be a string"),
        ("exit 0", {"universal_newlines": True}, "universal_newlines must be False"),
        ("exit 0", {"shell": False}, "shell must be True"),
        ("exit 0", {"bufsize": 4096}, "bufsize must be 0"),
        ("exit 0", {"text": True}, "text must be False"),
        ("exit 0", {"encoding": "utf-8"}, "encoding must be None"),
        ("exit 0", {"errors": "strict"}, "errors must be None"),
    ],
)
def test_subprocess_shell_bad_arguments(loop, cmd, kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        run(loop, loop.subprocess_shell(asyncio.SubprocessProtocol, cmd, **kwargs))


def test_create_subprocess_text_mode_fails(loop):
    async def main():
        with pytest.raises(ValueError, match="text must be False"):
            await asyncio.create_subprocess_exec(PY, text=True)
        with pytest.raises(ValueError, match="encoding must be None"):
            await asyncio.create_subprocess_shell("exit 0", encoding="utf-8")

    run(loop, main())


def test_non_string_argument(loop):
    # As asyncio on 3.11: Popen's own TypeError, raised before anything is spawned.
    with pytest.raises(TypeError, match=r"expected str, bytes or os\.PathLike object, not int"):
        run(loop, loop.subprocess_exec(asyncio.SubprocessProtocol, PY, 123))


def test_missing_program(loop):
    with pytest.raises(FileNotFoundError):
        run(loop, loop.subprocess_exec(asyncio.SubprocessProtocol, "/nonexistent/program"))


def test_popen_failure_leaves_no_transport(loop, monkeypatch):
    # Nothing half-made is left behind to warn about (CPython issue #24763).
    def failing_popen(*args, **kwargs):
        raise ZeroDivisionError

    monkeypatch.setattr(subprocess, "Popen", failing_popen)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(ZeroDivisionError):
            run(loop, asyncio.create_subprocess_exec(PY, "-c", "pass", stdin=PIPE))
        gc.collect()
    assert [str(w.message) for w in record] == []


# ---------------------------------------------------------------- threads


def test_subprocess_from_a_loop_in_another_thread(make_loop):
    loop = make_loop()
    result = []

    def thread_main():
        async def main():
            procs = [
                await asyncio.create_subprocess_exec(PY, "-c", f"print({i})", stdout=PIPE)
                for i in range(3)
            ]
            outs = await asyncio.gather(*(p.communicate() for p in procs))
            return [int(out) for out, _ in outs], [p.returncode for p in procs]

        result.append(run(loop, main()))

    thread = threading.Thread(target=thread_main)
    thread.start()
    thread.join(30)
    assert result == [([0, 1, 2], [0, 0, 0])]


# ---------------------------------------------------------------- corun only


@pytest.mark.corun_only
def test_no_sigchld_handler_and_no_threads(loop):
    before = signal.getsignal(signal.SIGCHLD)
    threads_before = set(threading.enumerate())
    seen = []

    async def main():
        proc = await asyncio.create_subprocess_exec(*SLEEP_READY, stdout=PIPE)
        await proc.stdout.readline()
        # The thread that spawned the child ends once it handed the child over.
        deadline = loop.time() + 5
        while set(threading.enumerate()) - threads_before and loop.time() < deadline:
            await asyncio.sleep(0.001)
        new_threads = set(threading.enumerate()) - threads_before
        seen.append((signal.getsignal(signal.SIGCHLD), new_threads))
        proc.kill()
        return await proc.wait()

    assert run(loop, main()) == -signal.SIGKILL
    assert seen == [(before, set())]  # pidfd: no signal handler, no waiter thread
    assert signal.getsignal(signal.SIGCHLD) == before


@pytest.mark.corun_only
def test_fallback_thread_without_pidfd(loop, monkeypatch):
    def no_pidfd(pid, flags=0):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    proto = RecordingProtocol(loop)

    async def main():
        transport, _ = await loop.subprocess_exec(lambda: proto, *SLEEP_READY)
        assert not transport._watcher.uses_pidfd
        await proto.got_stdout
        transport.kill()
        await proto.done
        transport.close()
        proc = await asyncio.create_subprocess_exec(PY, "-c", "import sys; sys.exit(9)")
        assert await proc.wait() == 9

    run(loop, main())
    assert ("exited", -signal.SIGKILL) in proto.events
    assert proto.events[-1] == ("lost", None)


@pytest.mark.corun_only
def test_child_reaped_by_popen_reports_its_status(loop, caplog):
    # Popen.wait() reaps the child behind the transport's back: its status is used.
    proto = RecordingProtocol(loop)

    async def main():
        transport, _ = await loop.subprocess_exec(
            lambda: proto, PY, "-c", "import sys; sys.exit(5)", stdin=DEVNULL
        )
        transport.get_extra_info("subprocess").wait()
        await proto.done
        transport.close()

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        run(loop, main())
    assert ("exited", 5) in proto.events
    assert "exit status already read" not in caplog.text


@pytest.mark.corun_only
def test_child_reaped_by_someone_else_reports_255(loop, caplog):
    proto = RecordingProtocol(loop)

    async def main():
        transport, _ = await loop.subprocess_exec(
            lambda: proto, PY, "-c", "import sys; sys.exit(5)", stdin=DEVNULL
        )
        os.waitpid(transport.get_pid(), 0)  # a foreign waitpid()
        await proto.done
        transport.close()

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        run(loop, main())
    assert ("exited", 255) in proto.events
    assert "exit status already read" in caplog.text


@pytest.mark.corun_only
def test_loop_closed_with_child_running_releases_pidfd(loop):
    async def main():
        transport, _ = await loop.subprocess_exec(
            asyncio.SubprocessProtocol, *SLEEP, stdin=DEVNULL, stdout=DEVNULL, stderr=DEVNULL
        )
        return transport

    transport = run(loop, main())
    pid = transport.get_pid()
    proc = transport.get_extra_info("subprocess")
    loop.close()
    transport.close()  # kills the child; the watcher's pidfd is released at once
    assert transport._watcher._pidfd == -1
    os.waitpid(pid, 0)
    proc.returncode = -signal.SIGKILL  # reaped here; keeps Popen.__del__ quiet


# gh-119710: asyncio's wait() returns at the child's exit, not once its pipes
# close too, from its 2026 bugfix releases (measured: 3.13.18, 3.14.10, 3.15;
# not 3.12.1 or 3.13.0); corun does on every version.
STDLIB_WAIT_RETURNS_AT_EXIT = sys.version_info >= (3, 13, 18)


def test_wait_returns_while_a_grandchild_holds_the_pipes(loop, loop_kind):
    # The grandchild inherits stdin/stdout, says "ready", and stays until its
    # stdin closes: the child's pipes see no EOF after the child is killed.
    code = (
        "import subprocess, sys;"
        "subprocess.run([sys.executable, '-c',"
        " 'import sys; sys.stdout.write(\"ready\"); sys.stdout.flush(); sys.stdin.read()'])"
    )

    async def main():
        proc = await asyncio.create_subprocess_exec(PY, "-c", code, stdin=PIPE, stdout=PIPE)
        try:
            waiter = asyncio.ensure_future(proc.wait())
            assert await proc.stdout.readexactly(5) == b"ready"
            proc.kill()
            if loop_kind == "corun" or STDLIB_WAIT_RETURNS_AT_EXIT:
                assert await asyncio.wait_for(waiter, 10) == -signal.SIGKILL
            else:
                # Older asyncio: wait() also waits for the pipes.
                await asyncio.wait([waiter], timeout=0.5)
                assert not waiter.done()
                assert proc.returncode == -signal.SIGKILL
        finally:
            proc.stdin.close()  # the grandchild exits
            assert await proc.stdout.read() == b""
        assert await asyncio.wait_for(waiter, 10) == -signal.SIGKILL

    run(loop, main())
