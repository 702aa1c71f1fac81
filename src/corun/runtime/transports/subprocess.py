"""Subprocess transports: ``loop.subprocess_exec`` and ``loop.subprocess_shell``.

The child is spawned with ``subprocess.Popen`` on a thread of its own, which
ends once the child runs: fork (milliseconds for a process with a large
heap) and Popen's wait for the exec (an ``os.read`` on a status pipe) block,
and the loop must not. Its stdio pipes are connected through ``loop.connect_write_pipe`` / ``connect_read_pipe``
(``pipes.py``), and the protocol sees what asyncio's would, in the same order:
``connection_made``, then ``pipe_data_received`` / ``pipe_connection_lost``
as the pipes deliver, ``process_exited`` once the child is reaped, and
``connection_lost(None)`` last, only when the child exited *and* every pipe
closed. ``subprocess_exec`` returns after ``connection_made`` ran.

How a child's exit is noticed
-----------------------------

Things that don't work well (all tried by asyncio's child watchers over the
years; see bpo-38323 and the 3.12 deprecation of the watchers):

* A SIGCHLD handler. Signal handlers are process-global and can only be set
  from the main thread, so a loop in another thread cannot install one, two
  loops fight over it, and the handler cannot tell whose child exited.
* ``waitpid(-1)`` from that handler (FastChildWatcher) reaps *every* child,
  stealing exit statuses from ``subprocess.run`` and friends elsewhere in the
  program. Calling ``waitpid(pid)`` for every known child on each SIGCHLD
  (SafeChildWatcher) is O(children) per signal and still main-thread only.
* A thread per child blocked in ``waitpid(pid)`` (ThreadedChildWatcher) works
  anywhere, but costs a thread per child, and the thread outlives the loop.

What corun does: ``os.pidfd_open(pid)`` (Linux 5.3+) gives an fd that
becomes readable when the child exits. The loop watches it with epoll like
any other fd, and on readiness ``waitpid(pid, WNOHANG)`` reaps exactly that
child. No signal handler, no thread, nothing shared between loops, so any
number of loops in any threads can run children at once.

Without pidfd (``pidfd_open`` fails: ENOSYS on old kernels, EPERM under some
seccomp sandboxes) we fall back to the thread per child, which reports the
exit through ``call_soon_threadsafe``.

Who else may reap the child: ``Popen.send_signal()`` (so ``kill()`` and
``terminate()``), ``poll()`` and ``wait()`` all call ``waitpid`` themselves
and record the status in ``Popen.returncode``. Our ``waitpid`` then fails
with ECHILD, and we report Popen's status. Only when nobody recorded it (a
foreign ``waitpid(-1)``) do we report 255 with a warning, as asyncio does.
Conversely, once *we* reap, we store the status in ``Popen.returncode`` at
once, so Popen never signals or waits for a pid the kernel may have reused.

Deciding in ``close()`` whether the child still runs uses
``waitid(..., WNOWAIT)``, which looks without reaping, so the exit status is
left for the watcher (asyncio calls ``Popen.poll()``, which may reap it).
"""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import threading
import warnings
from collections import deque
from collections.abc import Callable
from typing import IO, Any, Final, TypeAlias

from corun.runtime._constants import logger
from corun.runtime.engine.futures import Future
from corun.runtime.engine.loop_core import LoopCore, as_asyncio_loop
from corun.runtime.transports.pipe import ProtocolT

PIPE: Final = subprocess.PIPE
STDOUT: Final = subprocess.STDOUT
DEVNULL: Final = subprocess.DEVNULL

#: What ``stdin``, ``stdout`` and ``stderr`` accept, as for ``subprocess.Popen``.
StdioArg: TypeAlias = "int | IO[Any] | None"
_PendingCall: TypeAlias = "tuple[Callable[..., object], tuple[Any, ...]]"


def _format_pipe(fd: StdioArg) -> str:
    if fd == PIPE:
        return "<pipe>"
    if fd == STDOUT:
        return "<stdout>"
    return repr(fd)


def _log_subprocess(msg: str, stdin: StdioArg, stdout: StdioArg, stderr: StdioArg) -> None:
    info = [msg]
    if stdin is not None:
        info.append(f"stdin={_format_pipe(stdin)}")
    if stdout is not None and stderr == STDOUT:
        info.append(f"stdout=stderr={_format_pipe(stdout)}")
    else:
        if stdout is not None:
            info.append(f"stdout={_format_pipe(stdout)}")
        if stderr is not None:
            info.append(f"stderr={_format_pipe(stderr)}")
    logger.debug(" ".join(info))


def _child_is_running(proc: subprocess.Popen[bytes]) -> bool:
    """Whether ``proc`` has not exited yet, without reaping it."""
    if proc.returncode is not None:
        return False
    try:
        # WNOWAIT: look, but leave the exit status for the watcher.
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False  # already reaped, by the watcher or by someone else
    return info is None


class _PipeEndpoint(asyncio.Protocol):
    """The protocol of one of the child's stdio pipes: forwards to the transport."""

    def __init__(self, owner: SubprocessTransport, fd: int) -> None:
        # Invariant: owner is None once the pipe's connection_lost ran
        # (disconnected is True from then on).
        self.owner: SubprocessTransport | None = owner
        self.fd: int = fd
        self.pipe: asyncio.BaseTransport | None = None
        self.disconnected: bool = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} fd={self.fd} pipe={self.pipe!r}>"

    def itself(self) -> _PipeEndpoint:
        """The protocol factory for ``connect_*_pipe``: this endpoint."""
        return self

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.pipe = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.disconnected = True
        owner = self.owner
        self.owner = None
        if owner is not None:
            owner._pipe_connection_lost(self.fd, exc)

    def pause_writing(self) -> None:
        owner = self.owner
        if owner is not None and owner._protocol is not None:
            owner._protocol.pause_writing()

    def resume_writing(self) -> None:
        owner = self.owner
        if owner is not None and owner._protocol is not None:
            owner._protocol.resume_writing()

    def data_received(self, data: bytes) -> None:
        owner = self.owner
        if owner is not None:
            owner._pipe_data_received(self.fd, data)


class _ChildWatcher:
    """Waits for one child to exit and tells its transport, exactly once.

    Through a pidfd on the loop when the kernel has them, else through a
    thread blocked in ``waitpid`` (see the module docstring).
    """

    def __init__(self, loop: LoopCore, transport: SubprocessTransport, pid: int) -> None:
        # Invariant: _transport is None once the exit was reported. _pidfd is
        # -1 unless a pidfd is open, and then it is registered as a reader
        # on _loop (while the loop is open).
        self._loop: LoopCore = loop
        self._transport: SubprocessTransport | None = transport
        self._pid: int = pid
        self._pidfd: int = -1
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start watching (the pidfd, or the fallback thread)."""
        try:
            pidfd = os.pidfd_open(self._pid)
        except ProcessLookupError:
            # Already reaped by someone else: report that on the next iteration.
            self._loop.call_soon(self._report, None)
            return
        except OSError:
            thread = threading.Thread(
                target=_wait_in_thread,
                args=(self,),
                name=f"corun-waitpid-{self._pid}",
                daemon=True,
            )
            self._thread = thread
            thread.start()
            return
        self._pidfd = pidfd
        self._loop._add_reader(pidfd, self._pidfd_ready)

    @property
    def uses_pidfd(self) -> bool:
        """Whether the exit is watched through a pidfd (False: the fallback thread)."""
        return self._thread is None

    def _pidfd_ready(self) -> None:
        try:
            pid, status = os.waitpid(self._pid, os.WNOHANG)
        except ChildProcessError:
            returncode: int | None = None  # someone else reaped it
        else:
            if pid == 0:
                return  # not reapable yet; level-triggered, so we are called again
            returncode = os.waitstatus_to_exitcode(status)
        self.close()
        self._report(returncode)

    def _report(self, returncode: int | None) -> None:
        transport = self._transport
        if transport is None:
            return
        self._transport = None  # breaks the watcher <-> transport cycle
        transport._child_exited(returncode)

    def close(self) -> None:
        """Stop watching and release the pidfd (the thread cannot be stopped)."""
        pidfd = self._pidfd
        if pidfd < 0:
            return
        self._pidfd = -1
        self._loop._remove_reader(pidfd)
        os.close(pidfd)

    def __del__(self) -> None:
        # The loop was closed before the child exited: nothing else will
        # close the pidfd.
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1


def _wait_in_thread(watcher: _ChildWatcher) -> None:
    """The fallback watcher's thread: block in ``waitpid`` and report to the loop."""
    pid = watcher._pid
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        returncode: int | None = None  # someone else reaped it
    else:
        returncode = os.waitstatus_to_exitcode(status)
    loop = watcher._loop
    try:
        loop.call_soon_threadsafe(watcher._report, returncode)
    except RuntimeError:
        logger.warning("Loop %r that handles pid %r is closed", loop, pid)


class SubprocessTransport(asyncio.SubprocessTransport):
    """A child process and its stdio pipes, as a transport.

    Made by ``loop.subprocess_exec()`` and ``loop.subprocess_shell()``.
    ``get_pipe_transport(0/1/2)`` gives the pipe transports for the child's
    stdin, stdout and stderr (None for those not created with ``PIPE``).
    """

    def __init__(
        self,
        loop: LoopCore,
        protocol: Any,
        proc: subprocess.Popen[bytes],
        waiter: Future | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        extra = {} if extra is None else extra
        extra["subprocess"] = proc
        super().__init__(extra)
        # Invariant: _pending_calls holds the protocol callbacks due before
        # connection_made has been scheduled, and is None afterwards; each
        # protocol callback is scheduled with call_soon, in order (none at
        # all if _connect_failed: the protocol never got connection_made).
        # _pipes has an endpoint for each fd created with PIPE; its pipe is
        # None until connected. _returncode is set once, by _process_exited.
        # connection_lost is scheduled once (_finished), after _returncode is
        # set and every pipe disconnected; it clears _proc, _protocol and
        # _exit_waiters.
        self._loop: LoopCore = loop
        self._protocol: Any = protocol
        self._proc: subprocess.Popen[bytes] | None = proc
        self._pid: int = proc.pid
        self._returncode: int | None = None
        self._closed: bool = True  # until __init__ succeeds: __del__ must not warn
        self._finished: bool = False
        self._connect_failed: bool = False
        self._exit_waiters: list[Future] | None = []
        self._pending_calls: deque[_PendingCall] | None = deque()
        self._pipes: dict[int, _PipeEndpoint] = {}
        for fd, pipe in enumerate((proc.stdin, proc.stdout, proc.stderr)):
            if pipe is not None:
                self._pipes[fd] = _PipeEndpoint(self, fd)
        self._watcher: _ChildWatcher = _ChildWatcher(loop, self, proc.pid)
        self._watcher.start()
        loop.create_task(self._connect_pipes(proc, waiter))
        self._closed = False

        if loop.get_debug():
            args = proc.args
            program = args if isinstance(args, (bytes, str, os.PathLike)) else next(iter(args))
            logger.debug("process %r created: pid %s", program, self._pid)

    def __repr__(self) -> str:
        info = [type(self).__name__]
        if self._closed:
            info.append("closed")
        info.append(f"pid={self._pid}")
        if self._returncode is not None:
            info.append(f"returncode={self._returncode}")
        else:
            info.append("running")
        stdin = self._pipes.get(0)
        if stdin is not None:
            info.append(f"stdin={stdin.pipe}")
        stdout = self._pipes.get(1)
        if stdout is not None:
            info.append(f"stdout={stdout.pipe}")
        stderr = self._pipes.get(2)
        if stderr is not None:
            info.append(f"stderr={stderr.pipe}")
        return "<{}>".format(" ".join(info))

    def __del__(self) -> None:
        if not self._closed:
            warnings.warn(
                f"unclosed transport {self!r}", ResourceWarning, stacklevel=2, source=self
            )
            self.close()

    async def _connect_pipes(self, proc: subprocess.Popen[bytes], waiter: Future | None) -> None:
        """Wrap the child's pipes in transports, then connect the protocol.

        The pipes go through the loop's own ``connect_write_pipe`` and
        ``connect_read_pipe``, as in asyncio, so a subclass or a test that
        wraps those methods sees these pipes too.
        """
        loop = as_asyncio_loop(self._loop)
        try:
            for fd, pipe in enumerate((proc.stdin, proc.stdout, proc.stderr)):
                if pipe is None:
                    continue
                endpoint = self._pipes[fd]
                if fd == 0:
                    transport: asyncio.BaseTransport
                    transport, _ = await loop.connect_write_pipe(endpoint.itself, pipe)
                else:
                    transport, _ = await loop.connect_read_pipe(endpoint.itself, pipe)
                endpoint.pipe = transport
                if self._closed:
                    transport.close()  # close() ran before this pipe was connected
            loop.call_soon(self._protocol.connection_made, self)
            pending = self._pending_calls
            self._pending_calls = None
            if pending is not None:
                for callback, args in pending:
                    loop.call_soon(callback, *args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._abandon_protocol(proc)
            if waiter is not None and not waiter.cancelled():
                waiter.set_exception(exc)
        else:
            if waiter is not None and not waiter.cancelled():
                waiter.set_result(None)

    def _abandon_protocol(self, proc: subprocess.Popen[bytes]) -> None:
        """The pipes could not all be connected: the protocol never hears of the child.

        The transport still reaps the child and completes ``_wait()``, so the
        caller can kill it and wait, as ``subprocess_exec`` does.
        """
        self._connect_failed = True
        self._pending_calls = None
        for fd, pipe in enumerate((proc.stdin, proc.stdout, proc.stderr)):
            endpoint = self._pipes.get(fd)
            if endpoint is None or endpoint.pipe is not None:
                continue
            endpoint.disconnected = True
            endpoint.owner = None
            if pipe is not None:
                pipe.close()
        self._try_finish()

    # --- the asyncio.SubprocessTransport interface ---------------------------

    def get_pid(self) -> int:
        """The child's process id."""
        return self._pid

    def get_returncode(self) -> int | None:
        """The child's exit code once ``process_exited`` was delivered, else None.

        Negative ``-N`` when signal ``N`` killed it.
        """
        return self._returncode

    def get_pipe_transport(self, fd: int) -> asyncio.BaseTransport | None:
        """The pipe transport of the child's fd 0, 1 or 2, or None if it has no pipe."""
        endpoint = self._pipes.get(fd)
        return None if endpoint is None else endpoint.pipe

    def _check_proc(self) -> subprocess.Popen[bytes]:
        proc = self._proc
        if proc is None:
            raise ProcessLookupError()
        return proc

    def send_signal(self, signal: int) -> None:
        """Send ``signal`` to the child.

        Raises:
            ProcessLookupError: the transport already reported ``connection_lost``.
        """
        self._check_proc().send_signal(signal)

    def terminate(self) -> None:
        """Send SIGTERM to the child.

        Raises:
            ProcessLookupError: the transport already reported ``connection_lost``.
        """
        self._check_proc().terminate()

    def kill(self) -> None:
        """Send SIGKILL to the child.

        Raises:
            ProcessLookupError: the transport already reported ``connection_lost``.
        """
        self._check_proc().kill()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Deliver further events to ``protocol``."""
        self._protocol = protocol

    def get_protocol(self) -> Any:
        """The protocol receiving the events."""
        return self._protocol

    def is_closing(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def close(self) -> None:
        """Close the pipes, and kill the child if it still runs.

        The protocol still gets ``process_exited`` and ``connection_lost``
        once the child is reaped.
        """
        if self._closed:
            return
        self._closed = True
        for endpoint in self._pipes.values():
            if endpoint.pipe is not None:
                endpoint.pipe.close()
        proc = self._proc
        if proc is not None and self._returncode is None and _child_is_running(proc):
            if self._loop.get_debug():
                logger.warning("Close running child process: kill %r", self)
            try:
                proc.kill()
            except ProcessLookupError:
                pass
        if self._loop.is_closed():
            # Nothing will run the watcher any more; at least give its fd back.
            self._watcher.close()

    # --- events from the pipes and the watcher -------------------------------

    def _call(self, callback: Callable[..., object], *args: Any) -> None:
        if self._connect_failed:
            return
        self._schedule(callback, *args)

    def _schedule(self, callback: Callable[..., object], *args: Any) -> None:
        pending = self._pending_calls
        if pending is not None:
            pending.append((callback, args))
        else:
            self._loop.call_soon(callback, *args)

    def _pipe_data_received(self, fd: int, data: bytes) -> None:
        self._call(self._protocol.pipe_data_received, fd, data)

    def _pipe_connection_lost(self, fd: int, exc: BaseException | None) -> None:
        self._call(self._protocol.pipe_connection_lost, fd, exc)
        self._try_finish()

    def _child_exited(self, returncode: int | None) -> None:
        """From the watcher: the child was reaped (None: someone else reaped it)."""
        proc = self._proc
        if returncode is None:
            returncode = None if proc is None else proc.returncode
            if returncode is None:
                logger.warning(
                    "child process pid %d exit status already read:  will report returncode 255",
                    self._pid,
                )
                returncode = 255
        elif proc is not None:
            # Now, not in _process_exited: Popen must not waitpid() or signal
            # a pid that the kernel may already have given to another process.
            proc.returncode = returncode
        # One more iteration, as asyncio's watchers take, so pipe data that
        # arrived together with the exit is delivered first.
        self._loop.call_soon(self._process_exited, returncode)

    def _process_exited(self, returncode: int) -> None:
        if self._loop.get_debug():
            logger.info("%r exited with return code %r", self, returncode)
        self._returncode = returncode
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.returncode = returncode
        self._call(self._protocol.process_exited)
        self._try_finish()
        # wait() returns now, not when the pipes close too: a grandchild that
        # holds them must not make it hang. asyncio does so since gh-119710
        # (2026 bugfix releases: not in 3.12.1 or 3.13.0, in 3.13.18 and 3.14.10);
        # corun does on every version, as no version's suite relies on the hang.
        self._wake_exit_waiters()

    def _wake_exit_waiters(self) -> None:
        waiters = self._exit_waiters
        self._exit_waiters = None
        returncode = self._returncode
        if waiters is not None and returncode is not None:
            for waiter in waiters:
                if not waiter.cancelled():
                    waiter.set_result(returncode)

    def _try_finish(self) -> None:
        if self._finished or self._returncode is None:
            return
        for endpoint in self._pipes.values():
            if not endpoint.disconnected:
                return
        self._finished = True
        self._schedule(self._call_connection_lost, None)

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        try:
            if not self._connect_failed:
                self._protocol.connection_lost(exc)
        finally:
            # Wake up the futures waiting in _wait(), if the exit did not.
            self._wake_exit_waiters()
            self._proc = None
            self._protocol = None

    async def _wait(self) -> int:
        """Wait for the child to exit; its return code (``asyncio.subprocess.Process.wait``).

        Returns once the exit is delivered, even while a pipe is still open.
        """
        if self._returncode is not None:
            return self._returncode
        waiter: Future = self._loop.create_future()
        if self._exit_waiters is not None:
            self._exit_waiters.append(waiter)
        returncode: int = await waiter
        return returncode


# --- entry points ----------------------------------------------------------


async def _make_subprocess_transport(
    loop: LoopCore,
    protocol: asyncio.BaseProtocol,
    args: Any,
    shell: bool,
    stdin: StdioArg,
    stdout: StdioArg,
    stderr: StdioArg,
    bufsize: int,
    **kwargs: Any,
) -> SubprocessTransport:
    proc = await _start_child(
        loop,
        functools.partial(
            subprocess.Popen,
            args,
            shell=shell,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            universal_newlines=False,
            bufsize=bufsize,
            **kwargs,
        ),
    )
    waiter: Future = loop.create_future()
    try:
        transport = SubprocessTransport(loop, protocol, proc, waiter)
    except BaseException:
        _abandon(proc)
        raise
    try:
        await waiter
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException:
        # Cancelled (or failed) before the protocol was connected: kill the
        # child and wait until it is reaped, so nothing is left running.
        transport.close()
        await transport._wait()
        raise
    return transport


async def _start_child(
    loop: LoopCore, popen: Callable[[], subprocess.Popen[Any]]
) -> subprocess.Popen[Any]:
    """``popen()`` on a thread that ends once the child runs (see the module docstring).

    Cancelled meanwhile, it still lets the spawn finish, then kills and reaps
    the child (off the loop's thread too) before it raises CancelledError: as
    with asyncio, a cancelled ``subprocess_exec`` leaves no child behind.
    """
    started: Future = loop.create_future()
    thread = threading.Thread(
        target=_run_popen, args=(loop, started, popen), name="corun-spawn", daemon=True
    )
    thread.start()
    try:
        proc: subprocess.Popen[Any] = await asyncio.shield(started)
        return proc
    except asyncio.CancelledError:
        try:
            proc = await _through_cancellation(started)
        except Exception:
            raise asyncio.CancelledError from None  # the spawn failed: nothing to reap
        reaped = as_asyncio_loop(loop).run_in_executor(None, _abandon, proc)
        await _through_cancellation(reaped)
        raise
    finally:
        del started  # it may hold the error, whose traceback holds this frame


async def _through_cancellation(fut: Any) -> Any:
    """Await ``fut`` to its end, however often the awaiting task is cancelled meanwhile."""
    while True:
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            if fut.done():
                return fut.result()


def _run_popen(loop: LoopCore, started: Future, popen: Callable[[], subprocess.Popen[Any]]) -> None:
    try:
        proc = popen()
    except BaseException as exc:
        _hand_over(loop, started, None, exc)
        del started  # see _start_child
    else:
        _hand_over(loop, started, proc, None)


def _hand_over(
    loop: LoopCore,
    started: Future,
    proc: subprocess.Popen[Any] | None,
    exc: BaseException | None,
) -> None:
    try:
        loop.call_soon_threadsafe(_deliver_spawn, started, proc, exc)
    except RuntimeError:  # the loop closed meanwhile: nobody will take the child
        if proc is not None:
            _abandon(proc)


def _deliver_spawn(
    started: Future, proc: subprocess.Popen[Any] | None, exc: BaseException | None
) -> None:
    if exc is not None:
        started.set_exception(exc)
    else:
        started.set_result(proc)


def _abandon(proc: subprocess.Popen[bytes]) -> None:
    """Kill a child whose transport could not be set up, and close its pipes."""
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    # SIGKILL is prompt; reap it so no zombie is left behind.
    proc.wait()


def _check_options(
    shell: object,
    want_shell: bool,
    universal_newlines: object,
    bufsize: int,
    text: object,
    encoding: object,
    errors: object,
) -> None:
    """asyncio's checks: its subprocess pipes are bytes, unbuffered, and the method decides ``shell``."""
    if universal_newlines:
        raise ValueError("universal_newlines must be False")
    if bool(shell) != want_shell:
        raise ValueError(f"shell must be {want_shell}")
    if bufsize != 0:
        raise ValueError("bufsize must be 0")
    if text:
        raise ValueError("text must be False")
    if encoding is not None:
        raise ValueError("encoding must be None")
    if errors is not None:
        raise ValueError("errors must be None")


async def _spawn(
    loop: LoopCore,
    protocol_factory: Callable[[], ProtocolT],
    popen_args: Any,
    shell: bool,
    debug_log: str,
    stdin: StdioArg,
    stdout: StdioArg,
    stderr: StdioArg,
    kwargs: dict[str, Any],
) -> tuple[SubprocessTransport, ProtocolT]:
    protocol = protocol_factory()
    debug = loop.get_debug()
    if debug:
        _log_subprocess(debug_log, stdin, stdout, stderr)
    transport = await _make_subprocess_transport(
        loop, protocol, popen_args, shell, stdin, stdout, stderr, 0, **kwargs
    )
    if debug and loop.get_debug():
        logger.info("%s: %r", debug_log, transport)
    return transport, protocol


async def subprocess_exec(
    loop: LoopCore,
    protocol_factory: Callable[[], ProtocolT],
    program: Any,
    *args: Any,
    stdin: StdioArg = PIPE,
    stdout: StdioArg = PIPE,
    stderr: StdioArg = PIPE,
    universal_newlines: bool = False,
    shell: bool = False,
    bufsize: int = 0,
    encoding: str | None = None,
    errors: str | None = None,
    text: bool | None = None,
    **kwargs: Any,
) -> tuple[SubprocessTransport, ProtocolT]:
    """``loop.subprocess_exec``: run ``program`` with ``args``, without a shell.

    Raises:
        ValueError: ``universal_newlines``, ``shell`` or ``text`` is true,
            ``bufsize`` is not 0, or ``encoding`` or ``errors`` is given.
        OSError: the program could not be started (e.g. FileNotFoundError).
        TypeError: an argument is not a string, bytes or path.
    """
    _check_options(shell, False, universal_newlines, bufsize, text, encoding, errors)
    # The debug log names the program, not its arguments: they may hold
    # secrets, and be long.
    return await _spawn(
        loop,
        protocol_factory,
        (program, *args),
        False,
        f"execute program {program!r}",
        stdin,
        stdout,
        stderr,
        kwargs,
    )


async def subprocess_shell(
    loop: LoopCore,
    protocol_factory: Callable[[], ProtocolT],
    cmd: bytes | str,
    *,
    stdin: StdioArg = PIPE,
    stdout: StdioArg = PIPE,
    stderr: StdioArg = PIPE,
    universal_newlines: bool = False,
    shell: bool = True,
    bufsize: int = 0,
    encoding: str | None = None,
    errors: str | None = None,
    text: bool | None = None,
    **kwargs: Any,
) -> tuple[SubprocessTransport, ProtocolT]:
    """``loop.subprocess_shell``: run ``cmd`` with the shell (``/bin/sh -c``).

    Raises:
        ValueError: ``cmd`` is not a string, ``universal_newlines`` or
            ``text`` is true, ``shell`` is false, ``bufsize`` is not 0, or
            ``encoding`` or ``errors`` is given.
    """
    if not isinstance(cmd, (bytes, str)):
        raise ValueError("cmd must be a string")
    _check_options(shell, True, universal_newlines, bufsize, text, encoding, errors)
    return await _spawn(
        loop,
        protocol_factory,
        cmd,
        True,
        f"run shell command {cmd!r}",
        stdin,
        stdout,
        stderr,
        kwargs,
    )
