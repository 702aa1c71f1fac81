"""``getaddrinfo`` and ``getnameinfo``: written once, run on both loops."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from netkit import HAS_IPV6, HOST, needs_ipv6, run

pytestmark = pytest.mark.timeout(30)


def _same_addrinfo(got: list[Any], expected: list[Any]) -> None:
    assert sorted(got) == sorted(expected)


@pytest.mark.parametrize(
    "host",
    [HOST, pytest.param("::1", marks=needs_ipv6), "localhost"],
)
def test_getaddrinfo(loop, host):
    async def main():
        got = await loop.getaddrinfo(host, 80, type=socket.SOCK_STREAM)
        _same_addrinfo(got, socket.getaddrinfo(host, 80, type=socket.SOCK_STREAM))
        got = await loop.getaddrinfo(host, "443", proto=socket.IPPROTO_UDP)
        _same_addrinfo(got, socket.getaddrinfo(host, "443", proto=socket.IPPROTO_UDP))
        got = await loop.getaddrinfo(host, None, flags=socket.AI_NUMERICSERV)
        _same_addrinfo(got, socket.getaddrinfo(host, None, flags=socket.AI_NUMERICSERV))

    run(loop, main())


def test_getaddrinfo_errors(loop):
    async def main():
        with pytest.raises(socket.gaierror):
            await loop.getaddrinfo(HOST, "no-such-service-name")
        with pytest.raises(socket.gaierror):
            await loop.getaddrinfo("not-numeric", 80, flags=socket.AI_NUMERICHOST)

    run(loop, main())


def test_getnameinfo(loop):
    async def main():
        flags = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV
        assert await loop.getnameinfo((HOST, 80), flags) == (HOST, "80")
        if HAS_IPV6:
            assert await loop.getnameinfo(("::1", 8080, 0, 0), flags) == ("::1", "8080")
        assert await loop.getnameinfo((HOST, 80)) == socket.getnameinfo((HOST, 80), 0)

    run(loop, main())
