"""Low-level socket operations: ``loop.sock_recv()`` and friends.

Each operation first tries the system call at once: on a socket that is
ready (the common case for a busy server) it completes without touching
epoll. Only when the call would block does it register a one-shot reader or
writer, whose callback retries the call and completes a future.

A cancelled operation must not leave its registration behind, and must not
remove a registration that a later operation on the same socket made. The
done callback removes the reader or writer only if the registered handle is
still the one this operation created (registering a new one cancels the old).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import socket
import ssl
import stat
from asyncio import SendfileNotAvailableError
from collections.abc import Awaitable, Callable
from typing import Any, Final

from corun.runtime._constants import logger
from corun.runtime.engine.futures import Future
from corun.runtime.engine.handles import Handle
from corun.runtime.engine.loop_core import LoopCore, as_asyncio_loop
from corun.runtime.net.dns import ensure_resolved

#: How much sock_sendfile's fallback reads per chunk.
SENDFILE_FALLBACK_CHUNK: Final = 256 * 1024
# sendfile(2) refuses this pair of fds (not a regular file, an unsupported socket).
_SENDFILE_UNSUPPORTED: Final = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})


def check_unix_stream_socket(sock: socket.socket) -> None:
    """Raise asyncio's ValueError unless ``sock`` is a Unix stream socket."""
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        raise ValueError(f"A UNIX Domain Stream Socket was expected, got {sock!r}")


def _remove_stale_socket_file(path: str | bytes) -> None:
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        logger.error("Unable to check or remove stale UNIX socket %r: %r", path, err)


async def remove_stale_unix_socket(loop: LoopCore, path: str | bytes) -> None:
    """Remove a socket file left at ``path`` by an earlier server, as asyncio does.

    In the executor: a path lookup can block (a slow disk, a network file
    system), and the loop must not.
    """
    await as_asyncio_loop(loop).run_in_executor(None, _remove_stale_socket_file, path)


def check_not_ssl_socket(sock: socket.socket) -> None:
    if isinstance(sock, ssl.SSLSocket):
        raise TypeError("Socket cannot be of type SSLSocket")


def _check_socket(loop: LoopCore, sock: socket.socket) -> None:
    check_not_ssl_socket(sock)
    if loop.get_debug() and sock.gettimeout() != 0:
        raise ValueError("the socket must be non-blocking")


def _reader_done(loop: LoopCore, fd: int, handle: Handle, fut: Future) -> None:
    if not handle._cancelled:
        loop._remove_reader(fd)


def _writer_done(loop: LoopCore, fd: int, handle: Handle, fut: Future) -> None:
    if not handle._cancelled:
        loop._remove_writer(fd)


async def _wait_fd(
    loop: LoopCore, sock: socket.socket, writable: bool, callback: Callable[..., None], *args: Any
) -> Any:
    """Await ``fut``, which ``callback(fut, *args)``, called whenever ``sock`` is ready, completes.

    The registration goes when ``fut`` is done, however that happens
    (completed, failed, or cancelled with the awaiting task). The handle
    calls ``callback`` directly: a frame between them would outlive an
    error, through the traceback, and hold the future, which holds the error.
    """
    fut: Future = loop.create_future()
    fd = sock.fileno()
    loop._ensure_fd_no_transport(fd)
    if writable:
        handle = loop._add_writer(fd, callback, fut, *args)
        fut.add_done_callback(functools.partial(_writer_done, loop, fd, handle))
    else:
        handle = loop._add_reader(fd, callback, fut, *args)
        fut.add_done_callback(functools.partial(_reader_done, loop, fd, handle))
    try:
        return await fut
    finally:
        # The exception's traceback holds this frame; the future and the
        # handle's arguments hold the exception: break the cycle.
        del fut, handle


def _complete(fut: Future, call: Callable[..., Any], *args: Any) -> None:
    """Retry ``call(*args)``; complete ``fut`` unless it would still block."""
    if fut.done():
        return
    try:
        result = call(*args)
    except (BlockingIOError, InterruptedError):
        return
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        fut.set_exception(exc)
        # The exception's traceback holds this frame, which holds the future
        # and the arguments; forget them, or the exception is in a cycle.
        del fut, args
    else:
        fut.set_result(result)


def _call_method(sock: socket.socket, name: str, *args: Any) -> Any:
    # Looked up on every try, as asyncio does: tests (and wrappers) replace
    # a socket's methods between attempts.
    return getattr(sock, name)(*args)


async def _attempt(
    loop: LoopCore, sock: socket.socket, writable: bool, name: str, *args: Any
) -> Any:
    """``sock.<name>(*args)`` at once if ``sock`` is ready for it, else once it is."""
    _check_socket(loop, sock)
    try:
        return _call_method(sock, name, *args)
    except (BlockingIOError, InterruptedError):
        pass
    return await _wait_fd(loop, sock, writable, _complete, _call_method, sock, name, *args)


async def sock_recv(loop: LoopCore, sock: socket.socket, nbytes: int) -> bytes:
    """Receive up to ``nbytes`` from a connected non-blocking socket."""
    data: bytes = await _attempt(loop, sock, False, "recv", nbytes)
    return data


async def sock_recv_into(loop: LoopCore, sock: socket.socket, buf: Any) -> int:
    """Receive into ``buf``; return the number of bytes received."""
    nbytes: int = await _attempt(loop, sock, False, "recv_into", buf)
    return nbytes


async def sock_recvfrom(loop: LoopCore, sock: socket.socket, bufsize: int) -> tuple[bytes, Any]:
    """Receive a datagram of up to ``bufsize`` bytes; return ``(data, address)``."""
    received: tuple[bytes, Any] = await _attempt(loop, sock, False, "recvfrom", bufsize)
    return received


async def sock_recvfrom_into(
    loop: LoopCore, sock: socket.socket, buf: Any, nbytes: int = 0
) -> tuple[int, Any]:
    """Receive a datagram into ``buf``; return ``(nbytes, address)``."""
    received: tuple[int, Any] = await _attempt(
        loop, sock, False, "recvfrom_into", buf, nbytes or len(buf)
    )
    return received


def _on_sendall_writable(
    fut: Future, sock: socket.socket, view: memoryview, progress: list[int]
) -> None:
    if fut.done():
        return
    start = progress[0]
    try:
        sent = sock.send(view[start:])
    except (BlockingIOError, InterruptedError):
        return
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        fut.set_exception(exc)
        del fut  # see _complete
        return
    start += sent
    if start == len(view):
        fut.set_result(None)
    else:
        progress[0] = start


async def sock_sendall(loop: LoopCore, sock: socket.socket, data: Any) -> None:
    """Send all of ``data``; raise on error (how much was sent is then unknown)."""
    _check_socket(loop, sock)
    try:
        sent = sock.send(data)
    except (BlockingIOError, InterruptedError):
        sent = 0
    view = memoryview(data).cast("B")
    if sent == len(view):
        return
    await _wait_fd(loop, sock, True, _on_sendall_writable, sock, view, [sent])


async def sock_sendto(loop: LoopCore, sock: socket.socket, data: Any, address: Any) -> int:
    """Send a datagram to ``address``; return the number of bytes sent."""
    sent: int = await _attempt(loop, sock, True, "sendto", data, address)
    return sent


def _connect_result(sock: socket.socket, address: Any) -> None:
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err != 0:
        raise OSError(err, f"Connect call failed {address}")


async def sock_connect(loop: LoopCore, sock: socket.socket, address: Any) -> None:
    """Connect ``sock`` to ``address``, resolving a host name first if needed."""
    _check_socket(loop, sock)
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        infos = await ensure_resolved(
            loop, address, family=sock.family, type=sock.type, proto=sock.proto
        )
        address = infos[0][4]
    try:
        sock.connect(address)
        return
    except (BlockingIOError, InterruptedError):
        pass
    try:
        await _wait_fd(loop, sock, True, _complete, _connect_result, sock, address)
    finally:
        # The future holds the exception, whose traceback holds this frame.
        address = None


async def sock_accept(loop: LoopCore, sock: socket.socket) -> tuple[socket.socket, Any]:
    """Accept a connection; return ``(conn, address)``, ``conn`` non-blocking."""
    conn, address = await _attempt(loop, sock, False, "accept")
    conn.setblocking(False)
    return conn, address


# --- sendfile -----------------------------------------------------------------


def check_sendfile_params(sock: socket.socket, file: Any, offset: object, count: object) -> None:
    """asyncio's argument checks for sock_sendfile."""
    if "b" not in getattr(file, "mode", "b"):
        raise ValueError("file should be opened in binary mode")
    if not sock.type == socket.SOCK_STREAM:
        raise ValueError("only SOCK_STREAM type sockets are supported")
    check_file_params(file, offset, count)


def check_file_params(file: Any, offset: object, count: object) -> None:
    """asyncio's checks of sendfile's file, offset and count."""
    if "b" not in getattr(file, "mode", "b"):
        raise ValueError("file should be opened in binary mode")
    if count is not None:
        if not isinstance(count, int):
            raise TypeError(f"count must be a positive integer (got {count!r})")
        if count <= 0:
            raise ValueError(f"count must be a positive integer (got {count!r})")
    if not isinstance(offset, int):
        raise TypeError(f"offset must be a non-negative integer (got {offset!r})")
    if offset < 0:
        raise ValueError(f"offset must be a non-negative integer (got {offset!r})")


#: The most one os.sendfile() call is asked for (Linux sends at most this much).
_SENDFILE_MAX: Final = 0x7FFFF000


def _nothing() -> None:
    return None


async def sock_sendfile_native(
    loop: LoopCore, sock: socket.socket, file: Any, offset: int, count: int | None
) -> int:
    """Send a file with os.sendfile (zero-copy); SendfileNotAvailableError if it can't.

    ``os.sendfile`` reads the file, and a read from disk can block, so each
    call runs in the loop's executor while the loop waits for the socket to
    take more. There is no ``fstat`` for the size first: sendfile returns 0
    at the end of the file. A cancelled call still lets the one in flight
    finish before the socket is handed back, so that nothing is written to
    it afterwards.
    """
    try:
        fileno = file.fileno()
    except (AttributeError, OSError) as exc:
        raise SendfileNotAvailableError("not a regular file") from exc
    sock_fd = sock.fileno()
    sent = 0
    try:
        while count is None or sent < count:
            want = _SENDFILE_MAX if count is None else min(count - sent, _SENDFILE_MAX)
            job = loop.run_in_executor(None, os.sendfile, sock_fd, fileno, offset + sent, want)
            try:
                done = await asyncio.shield(job)
            except (BlockingIOError, InterruptedError):
                await _wait_fd(loop, sock, True, _complete, _nothing)
                continue
            except OSError as exc:
                if sent == 0 and exc.errno in _SENDFILE_UNSUPPORTED:
                    raise SendfileNotAvailableError("os.sendfile() is not supported here") from None
                raise
            except asyncio.CancelledError:
                try:
                    sent += await job
                except Exception:
                    pass
                raise
            if done == 0:
                break  # end of the file
            sent += done
        return sent
    finally:
        # The file position ends after what was sent, even when nothing was (at
        # the end of the file), as asyncio leaves it since its 2026 bugfix
        # releases (3.13.18, 3.14.10; 3.12.1 and 3.13.0 left it where it was).
        # A file that cannot seek keeps its position.
        if sent > 0:
            file.seek(offset + sent)
        else:
            with contextlib.suppress(OSError):
                file.seek(offset)


async def send_in_chunks(
    loop: LoopCore,
    file: Any,
    offset: int,
    count: int | None,
    chunk: int,
    send: Callable[[memoryview], Awaitable[None]],
) -> int:
    """Read ``file`` from ``offset`` in chunks, in the executor, and ``await send(piece)``.

    ``count`` bytes, or to the end of the file. Returns the bytes sent; the
    file position is left after them, as asyncio does.
    """
    # From ``offset``, even 0, not from wherever the file position is
    # (gh-150107; asyncio's older releases skipped the seek for 0).
    if hasattr(file, "seek"):
        file.seek(offset)
    blocksize = min(count, chunk) if count else chunk
    buf = bytearray(blocksize)
    total = 0
    try:
        while True:
            if count:
                blocksize = min(count - total, blocksize)
                if blocksize <= 0:
                    break
            view = memoryview(buf)[:blocksize]
            read = await as_asyncio_loop(loop).run_in_executor(None, file.readinto, view)
            if not read:
                break
            await send(view[:read])
            total += read
        return total
    finally:
        if total > 0 and hasattr(file, "seek"):
            file.seek(offset + total)


async def sock_sendfile_fallback(
    loop: LoopCore, sock: socket.socket, file: Any, offset: int, count: int | None
) -> int:
    """Send a file by reading it in chunks (in the executor) and sock_sendall."""
    send = functools.partial(sock_sendall, loop, sock)
    return await send_in_chunks(loop, file, offset, count, SENDFILE_FALLBACK_CHUNK, send)


async def sock_sendfile(
    loop: LoopCore,
    sock: socket.socket,
    file: Any,
    offset: int = 0,
    count: int | None = None,
    *,
    fallback: bool | None = True,
) -> int:
    """``loop.sock_sendfile``: zero-copy when possible, else read-and-send if allowed."""
    _check_socket(loop, sock)
    check_sendfile_params(sock, file, offset, count)
    try:
        return await sock_sendfile_native(loop, sock, file, offset, count)
    except SendfileNotAvailableError:
        if not fallback:
            raise
    return await sock_sendfile_fallback(loop, sock, file, offset, count)
