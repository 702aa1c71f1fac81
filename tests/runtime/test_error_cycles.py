"""An error raised from the runtime leaves no reference cycle behind.

A cycle through an exception (its traceback holds a frame, the frame holds a
list or a future, which holds the exception) keeps every frame on the way
alive until the garbage collector runs: sockets, buffers and whole request
states. CPython clears such references in ``finally`` blocks; every error
path here is checked the same way on both loops, by collecting with
``gc.DEBUG_SAVEALL`` and looking for exceptions among what only the
collector could free.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable
from typing import Any
from unittest import mock

import pytest
import trustme
from netkit import HOST, refused_port

import corun

pytestmark = pytest.mark.timeout(30)


def exceptions_in_cycles(
    loop: asyncio.AbstractEventLoop, fail: Callable[[], Awaitable[Any]]
) -> list[str]:
    """Run ``fail()`` (which must raise) a few times; the exceptions only gc could free."""
    if type(loop).__module__.startswith("corun") and not corun.COMPILED:
        pytest.skip(
            "pure-Python build: its interpreted engine's frames (Future.result() raising) "
            "hold the future, as CPython's pure-Python Future's do; the compiled build, "
            "the default, has no such frames"
        )

    async def once() -> None:
        try:
            await fail()
        except (TimeoutError, OSError, ssl.SSLError):
            pass
        else:
            raise AssertionError("the path under test did not fail")

    loop.run_until_complete(once())  # warm up: first-time imports and caches
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(3):
            loop.run_until_complete(once())
        gc.collect()
        found = [f"{type(o).__name__}: {o}" for o in gc.garbage if isinstance(o, BaseException)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return found


def test_create_connection_refused(loop):
    with refused_port() as port:
        assert (
            exceptions_in_cycles(loop, lambda: loop.create_connection(asyncio.Protocol, HOST, port))
            == []
        )


def stdlib_leaks_here(
    request: pytest.FixtureRequest, loop_kind: str, errors: Any, *, fixed_in: tuple[int, int]
) -> None:
    """The stdlib's asyncio leaves this cycle before ``fixed_in``; corun never does.

    Measured on 3.11.7, 3.12.1, 3.13.18, 3.14.10 and 3.15.2.
    """
    if loop_kind == "asyncio":
        errors.pop_all()  # asyncio reports the failed server-side handshakes too
        if sys.version_info < fixed_in:
            request.applymarker(
                pytest.mark.xfail(
                    reason=f"asyncio before {fixed_in[0]}.{fixed_in[1]} leaves this cycle",
                    strict=True,
                )
            )


def test_create_connection_refused_on_every_address_happy_eyeballs(
    loop, request, loop_kind, errors
):
    stdlib_leaks_here(request, loop_kind, errors, fixed_in=(3, 13))
    with refused_port() as port1, refused_port() as port2:
        infos = [
            (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (HOST, port1)),
            (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (HOST, port2)),
        ]

        async def fake_getaddrinfo(*args: Any, **kwargs: Any) -> list[Any]:
            return infos

        # Two addresses for one host: the staggered (happy eyeballs) path.
        with mock.patch.object(loop, "getaddrinfo", fake_getaddrinfo):
            assert (
                exceptions_in_cycles(
                    loop,
                    lambda: loop.create_connection(
                        asyncio.Protocol, "twohosts.test", 80, happy_eyeballs_delay=0.01
                    ),
                )
                == []
            )


def test_sock_connect_refused(loop):
    with refused_port() as port:

        async def connect() -> None:
            with socket.socket() as sock:
                sock.setblocking(False)
                await loop.sock_connect(sock, (HOST, port))

        assert exceptions_in_cycles(loop, connect) == []


def test_sock_recv_reset(loop):
    async def recv_reset() -> None:
        a, b = socket.socketpair()
        with a, b:
            a.setblocking(False)
            task = loop.create_task(loop.sock_recv(a, 100))
            await asyncio.sleep(0)
            b.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            b.close()
            raise await_or(await asyncio.gather(task, return_exceptions=True))

    assert exceptions_in_cycles(loop, recv_reset) == []


def await_or(results: list[Any]) -> BaseException:
    """The exception a gathered call ended with (socketpairs close cleanly: EOF)."""
    (result,) = results
    return result if isinstance(result, BaseException) else ConnectionResetError("EOF")


def test_unix_connection_refused(loop, short_tmp):
    missing = str(short_tmp / "nobody-listens")
    assert (
        exceptions_in_cycles(loop, lambda: loop.create_unix_connection(asyncio.Protocol, missing))
        == []
    )


def test_create_server_address_in_use(loop):
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert (
            exceptions_in_cycles(
                loop, lambda: loop.create_server(asyncio.Protocol, HOST, port, reuse_address=False)
            )
            == []
        )


def test_getaddrinfo_failure(loop):
    assert (
        exceptions_in_cycles(
            loop, lambda: loop.getaddrinfo("not a number", 80, flags=socket.AI_NUMERICHOST)
        )
        == []
    )


def test_tls_handshake_failure(loop, request, loop_kind, errors):
    stdlib_leaks_here(request, loop_kind, errors, fixed_in=(3, 14))
    server_ca, client_ca = trustme.CA(), trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ca.issue_cert(HOST).configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    client_ca.configure_trust(client_ctx)  # does not trust the server's CA

    async def handshake() -> None:
        server = await loop.create_server(asyncio.Protocol, HOST, 0, ssl=server_ctx)
        try:
            port = server.sockets[0].getsockname()[1]
            await loop.create_connection(
                asyncio.Protocol, HOST, port, ssl=client_ctx, server_hostname=HOST
            )
        finally:
            # Let the server side fail its half of the handshake here, where
            # what it leaves behind is counted, not in a later test.
            await asyncio.sleep(0.1)
            server.close()
            await server.wait_closed()

    assert exceptions_in_cycles(loop, handshake) == []


def test_subprocess_spawn_failure(loop):
    assert (
        exceptions_in_cycles(
            loop,
            lambda: loop.subprocess_exec(asyncio.SubprocessProtocol, "/nonexistent/program"),
        )
        == []
    )


def test_the_check_finds_a_cycle(loop):
    """The check itself: an error path that keeps its exception in a cycle is caught."""

    async def leaky() -> None:
        errors: list[BaseException] = []
        try:
            raise OSError("kept")
        except OSError as exc:
            errors.append(exc)  # the frame holds the list, the list the exception
            raise

    assert exceptions_in_cycles(loop, leaky) == ["OSError: kept"] * 3


if sys.platform != "linux":  # pragma: no cover
    pytest.skip("Linux only", allow_module_level=True)
