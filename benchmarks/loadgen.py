"""Closed-loop TCP load generator in Python (the fallback for ``loadgen.c``).

Same command line and the same one-line JSON output as the C version: N
connections on one ``selectors`` (epoll) loop, one request in flight per
connection, latencies recorded after the warmup for the measured duration.

It is used only when no C compiler is available. Its per-request interpreter
overhead is of the same order as the server's, so on a 2-core machine it may
be the bottleneck: check ``cpu_frac`` in its output (1.0 = one core saturated).

    python -m benchmarks.loadgen --mode echo --port 8000 --conns 10 --size 1024
"""

from __future__ import annotations

import argparse
import json
import math
import selectors
import socket
import sys
import time
from collections.abc import Sequence

_SCRATCH = 1 << 18


class _Conn:
    """One client connection and the state of its request in flight."""

    __slots__ = ("buf", "expect", "key", "received", "sent", "sock", "t_start", "want_out")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sent = 0
        self.received = 0
        self.expect = 0
        self.buf = bytearray()
        self.t_start = 0.0
        self.want_out = False
        self.key: selectors.SelectorKey | None = None


class LoadGenerator:
    """The client side of one echo or HTTP run; ``run()`` returns the JSON result."""

    def __init__(
        self,
        *,
        mode: str,
        host: str,
        port: int,
        conns: int,
        size: int,
        warmup: float,
        duration: float,
        path: str,
    ) -> None:
        self.mode = mode
        self.host = host
        self.port = port
        self.conns = conns
        self.size = size
        self.warmup = warmup
        self.duration = duration
        if mode == "http":
            self.request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
        else:
            self.request = bytes((97 + i % 26) for i in range(size))
        self.selector = selectors.DefaultSelector()
        self.latencies: list[float] = []
        self.measuring = False
        self.finished = False
        self.errors = 0

    def _set_out(self, c: _Conn, on: bool) -> None:
        if c.want_out != on:
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if on else 0)
            self.selector.modify(c.sock, events, c)
            c.want_out = on

    def _drop(self, c: _Conn) -> None:
        self.errors += 1
        self.selector.unregister(c.sock)
        c.sock.close()

    def _try_send(self, c: _Conn) -> None:
        req = self.request
        while c.sent < len(req):
            try:
                n = c.sock.send(req[c.sent :] if c.sent else req)
            except BlockingIOError:
                self._set_out(c, True)
                return
            except OSError:
                self._drop(c)
                return
            c.sent += n
        self._set_out(c, False)

    def _start(self, c: _Conn, t: float) -> None:
        c.sent = 0
        c.received = 0
        c.expect = 0
        c.buf.clear()
        c.t_start = t
        self._try_send(c)

    def _complete(self, c: _Conn) -> None:
        t = time.perf_counter()
        if self.measuring:
            self.latencies.append(t - c.t_start)
        if not self.finished:
            self._start(c, t)

    def _readable(self, c: _Conn, scratch: memoryview) -> None:
        try:
            n = c.sock.recv_into(scratch)
        except BlockingIOError:
            return
        except OSError:
            self._drop(c)
            return
        if n == 0:
            self._drop(c)
            return
        if self.mode == "echo":
            c.received += n
            if c.received >= self.size:
                self._complete(c)
            return
        c.buf += scratch[:n]
        if not c.expect:
            c.expect = _http_expect(c.buf)
        if c.expect and len(c.buf) >= c.expect:
            self._complete(c)

    def run(self) -> dict[str, object]:
        """Connect, run warmup and measurement, return the result dict."""
        conns: list[_Conn] = []
        for _ in range(self.conns):
            sock = socket.create_connection((self.host, self.port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
            c = _Conn(sock)
            self.selector.register(sock, selectors.EVENT_READ, c)
            conns.append(c)
        scratch = memoryview(bytearray(_SCRATCH))
        t0 = time.perf_counter()
        t_measure = t0 + self.warmup
        t_end = t_measure + self.duration
        m_start = m_end = t0
        cpu0 = cpu1 = 0.0
        for c in conns:
            self._start(c, t0)
        if self.warmup <= 0:
            self.measuring = True
            cpu0 = time.process_time()
        select = self.selector.select
        read_ev = selectors.EVENT_READ
        write_ev = selectors.EVENT_WRITE
        while True:
            for key, events in select(0.005):
                c = key.data
                if events & read_ev:
                    self._readable(c, scratch)
                if events & write_ev and c.sock.fileno() >= 0:
                    self._try_send(c)
            t = time.perf_counter()
            if not self.measuring and t >= t_measure:
                self.measuring = True
                m_start = t
                cpu0 = time.process_time()
            if self.measuring and t >= t_end:
                m_end = t
                cpu1 = time.process_time()
                self.finished = True
                break
            if self.errors >= self.conns:
                raise SystemExit("loadgen: every connection failed")
        for c in conns:
            if c.sock.fileno() >= 0:
                c.sock.close()
        elapsed = m_end - m_start
        lat = sorted(self.latencies)
        n = len(lat)
        return {
            "client": "python",
            "mode": self.mode,
            "conns": self.conns,
            "size": self.size,
            "requests": n,
            "duration": elapsed,
            "rps": n / elapsed if elapsed > 0 else 0.0,
            "p50_ms": percentile(lat, 0.50) * 1e3,
            "p99_ms": percentile(lat, 0.99) * 1e3,
            "mean_ms": (sum(lat) / n * 1e3) if n else 0.0,
            "cpu_s": cpu1 - cpu0,
            "cpu_frac": (cpu1 - cpu0) / elapsed if elapsed > 0 else 0.0,
            "errors": self.errors,
        }


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """The nearest-rank percentile ``p`` (0..1) of already sorted values; 0.0 if empty."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    k = min(n, max(1, math.ceil(p * n)))
    return sorted_values[k - 1]


def _http_expect(buf: bytearray) -> int:
    """Full length of the HTTP response in ``buf`` once its headers are in, else 0."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return 0
    body = 0
    for line in bytes(buf[:end]).split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            body = int(value)
    return end + 4 + body


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: run one load and print one JSON line."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loadgen")
    parser.add_argument("--mode", choices=("echo", "http"), default="echo")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--conns", type=int, default=10)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--path", default="/")
    args = parser.parse_args(argv)
    gen = LoadGenerator(
        mode=args.mode,
        host=args.host,
        port=args.port,
        conns=args.conns,
        size=args.size,
        warmup=args.warmup,
        duration=args.duration,
        path=args.path,
    )
    print(json.dumps(gen.run()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
