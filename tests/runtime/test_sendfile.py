"""``loop.sendfile``, native and fallback, on real files and sockets, on both loops."""

from __future__ import annotations

import asyncio
import io
import sys

import pytest
from netkit import closing, run, shut, tcp_pair, until

pytestmark = pytest.mark.timeout(30)


def test_loop_sendfile_native_and_fallback(loop, payload_file):
    path, data = payload_file

    async def main():
        server, tr, _pr, srv = await tcp_pair(loop)
        tr.write(b"HEAD")
        with open(path, "rb") as f:
            # fallback=False: succeeds only through the zero-copy path
            assert await loop.sendfile(tr, f, fallback=False) == len(data)
            assert f.tell() == len(data)
            assert await loop.sendfile(tr, f, offset=10, count=20, fallback=False) == 20
            assert f.tell() == 30
        buf = io.BytesIO(data[:100_000])
        with pytest.raises(asyncio.SendfileNotAvailableError):
            await loop.sendfile(tr, buf, fallback=False)
        assert await loop.sendfile(tr, buf) == 100_000  # the fallback reads and writes
        tr.write(b"TAIL")
        expected = b"HEAD" + data + data[10:30] + data[:100_000] + b"TAIL"
        await until(lambda: len(srv.data) >= len(expected), timeout=20)
        assert bytes(srv.data) == expected
        await closing(tr, srv.transport)
        await shut(server)

    run(loop, main())


def test_loop_sendfile_rejects_bad_arguments(loop, payload_file, tmp_path):
    path, _ = payload_file

    async def main():
        server, tr, _pr, srv = await tcp_pair(loop)
        with open(path) as text, pytest.raises(ValueError):
            await loop.sendfile(tr, text)
        with open(path, "rb") as f:
            with pytest.raises(ValueError):
                await loop.sendfile(tr, f, offset=-1)
            with pytest.raises(ValueError):
                await loop.sendfile(tr, f, count=0)
        await closing(tr, srv.transport)
        await shut(server)

    run(loop, main())


# Where the file position ends when sendfile sends nothing (offset at the end
# of the file), and where the fallback reads from with offset 0: asyncio's
# 2026 bugfix releases (gh-150107; measured in 3.13.18 and 3.14.10, not in
# 3.12.1 or 3.13.0) seek to the offset; corun does on every version.
STDLIB_SEEKS_TO_OFFSET = sys.version_info >= (3, 13, 18)


def test_loop_sendfile_file_position(loop, loop_kind, payload_file):
    path, data = payload_file
    seeks = loop_kind == "corun" or STDLIB_SEEKS_TO_OFFSET

    async def main():
        server, tr, _pr, srv = await tcp_pair(loop)
        with open(path, "rb") as f:
            f.seek(123)
            assert await loop.sendfile(tr, f, offset=len(data), fallback=False) == 0
            assert f.tell() == (len(data) if seeks else 123)
        buf = io.BytesIO(data[:1000])
        buf.seek(900)
        # The fallback (not a regular file): from offset 0, not from 900.
        sent = await loop.sendfile(tr, buf, offset=0)
        assert sent == (1000 if seeks else 100)
        assert buf.tell() == (1000 if seeks else 100)  # older: offset + sent, wrongly
        expected = data[:1000] if seeks else data[900:1000]
        await until(lambda: len(srv.data) >= len(expected))
        assert bytes(srv.data) == expected
        await closing(tr, srv.transport)
        await shut(server)

    run(loop, main())
