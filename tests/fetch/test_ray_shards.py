"""``corun fetch --ray``: hosts sharded over Ray actors, on a real local Ray cluster.

One local Ray (2 CPUs, a small object store, no dashboard) serves the whole
module: starting one takes seconds on a 2-core machine. The tests in this
process use its connection; the command-line tests join it by address.
The servers are real aiohttp servers on 127.0.0.1, one port per host; they
find the process behind each connection in /proc, so a test can tell which
worker served a request.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from fetch_servers import AppThread
from test_deferral import Patience

import corun
from corun.fetch import FetchOptions, ProgressState, journal_path, run_fetch
from corun.fetch.ray_shards import (
    INSTALL_HINT,
    NO_BUILD,
    RAY_BUILT,
    ClusterError,
    RayBackend,
    shard_of,
)

pytestmark = pytest.mark.timeout(240)

#: The tests that run Ray, or reach a cluster through it.
needs_ray = pytest.mark.skipif(
    not RAY_BUILT,
    reason=f"Ray has no build for Python {sys.version_info.major}.{sys.version_info.minor} "
    "(pyproject's ray extra: python_version < '3.15')",
)

WORKERS = 2


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    if not RAY_BUILT:
        pytest.skip(needs_ray.kwargs["reason"])
    with pytest.MonkeyPatch.context() as patch:
        # Loopback only (read when ray is imported; the workers inherit it).
        patch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        import ray

        # ray.init sets SIGINT's and SIGTERM's handlers, and ray.shutdown leaves them.
        saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
        ray.init(
            num_cpus=WORKERS,
            object_store_memory=100 * 1024 * 1024,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="ERROR",
        )
        try:
            yield str(ray.get_runtime_context().gcs_address)
        finally:
            ray.shutdown()
            for signum, handler in saved.items():
                signal.signal(signum, handler)


# --------------------------------------------------------------------------- servers


def _socket_owner(client_port: int, server_port: int) -> int | None:
    """The pid of the process holding the client end of a loopback TCP connection."""
    inode = None
    with open("/proc/net/tcp") as table:
        for row in table.readlines()[1:]:
            fields = row.split()
            local, remote = fields[1], fields[2]
            if (
                int(local.rsplit(":", 1)[1], 16) == client_port
                and int(remote.rsplit(":", 1)[1], 16) == server_port
            ):
                inode = fields[9]
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return int(pid)
            except OSError:
                continue
    return None


class Hosts:
    """Live hosts (one port each) and optionally a dead one, served from a thread.

    Live hosts answer ``/ok?n=LINE`` with ``ok LINE`` after ``delay`` s and
    record, per request, the host, the line and the pid of the client. The
    dead host's requests hang until ``release`` is set, then get a 503.
    """

    def __init__(self, live: int, *, dead: bool = False, delay: float = 0.0) -> None:
        self.delay = delay
        self.requests: list[tuple[str, int, int | None]] = []
        self.dead_hits = 0
        self._owners: dict[tuple[int, int], int | None] = {}
        self._lock = threading.Lock()
        self._live = live
        self._dead = dead
        self.live_hosts: list[str] = []
        self.dead_host = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.release: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._serve(),))
        self._thread.start()
        assert self._ready.wait(10)

    def add_live(self) -> str:
        """One more live host (the test wants one in a given shard)."""
        done = threading.Event()
        box: list[str] = []

        async def add() -> None:
            box.append(await self._site(self._ok_app))
            done.set()

        asyncio.run_coroutine_threadsafe(add(), self._loop)
        assert done.wait(10)
        self.live_hosts.append(box[0])
        return box[0]

    async def _site(self, app: web.Application) -> str:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        self._runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"127.0.0.1:{port}"

    async def _serve(self) -> None:
        self.release = asyncio.Event()
        self._stop = asyncio.Event()
        self._runners: list[web.AppRunner] = []
        self._ok_app = web.Application()
        self._ok_app.router.add_get("/ok", self._ok)
        for _ in range(self._live):
            self.live_hosts.append(await self._site(self._ok_app))
        if self._dead:
            dead_app = web.Application()
            dead_app.router.add_get("/ok", self._hang)
            self.dead_host = await self._site(dead_app)
        self._ready.set()
        await self._stop.wait()
        for runner in self._runners:
            await runner.cleanup()

    def _owner(self, request: web.Request) -> int | None:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        if peer is None or sock is None:
            return None
        key = (peer[1], sock[1])
        if key not in self._owners:
            self._owners[key] = _socket_owner(*key)
        return self._owners[key]

    async def _ok(self, request: web.Request) -> web.Response:
        owner = self._owner(request)
        with self._lock:
            self.requests.append((request.host, int(request.query["n"]), owner))
        if self.delay:
            await asyncio.sleep(self.delay)
        return web.Response(text=f"ok {request.query['n']}")

    async def _hang(self, request: web.Request) -> web.Response:
        self.dead_hits += 1
        assert self.release is not None
        await self.release.wait()
        return web.Response(status=503)

    def set_release(self) -> None:
        assert self.release is not None
        self._loop.call_soon_threadsafe(self.release.set)

    def lines_requested(self) -> list[int]:
        with self._lock:
            return [line for _host, line, _pid in self.requests]

    def close(self) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    served = Hosts(4)
    yield served
    served.close()


def write_input(path: Path, hosts: list[str], count: int, *, first: int = 1) -> dict[int, str]:
    """``count`` lines over ``hosts`` in turn; returns line -> host."""
    where = {}
    with path.open("w") as stream:
        for line in range(first, first + count):
            host = hosts[line % len(hosts)]
            where[line] = host
            stream.write(f"http://{host}/ok?n={line}\n")
    return where


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_one_line_each(out: Path, total: int) -> list[dict[str, Any]]:
    records = read_jsonl(out)
    assert [r["line"] for r in records] == list(range(1, total + 1))  # none lost, none doubled
    return records


def options(src: Path, out: Path, **extra: Any) -> FetchOptions:
    return FetchOptions(input=str(src), output=str(out), rate=None, progress=False, **extra)


# --------------------------------------------------------------------------- tests


def test_shard_of_is_stable_and_spreads() -> None:
    keys = [f"h{i}.example:443" for i in range(32)]
    here = [shard_of(key, 4) for key in keys]
    # The same in another process, whose str hash is salted differently.
    program = "import sys; from corun.fetch.ray_shards import shard_of; "
    program += f"print([shard_of(k, 4) for k in {keys!r}])"
    there = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "random"},
    )
    assert there.stdout.strip() == str(here)
    assert set(here) == {0, 1, 2, 3}
    spread = {shard_of(f"127.0.0.1:{port}", 2) for port in range(40000, 40016)}
    assert spread == {0, 1}


def test_a_backlog_keeps_its_order_from_memory_to_disk(tmp_path: Path) -> None:
    from corun.fetch.ray_shards import _Backlog, _Budget

    budget = _Budget(3)
    first, second = _Backlog(str(tmp_path), budget), _Backlog(str(tmp_path), budget)
    for line in range(1, 6):
        first.push((line, "error", "invalid_url", None, None))
    second.push((9, "error", "invalid_url", None, None))  # the budget is spent: on disk
    assert (len(first), len(second), budget.left) == (5, 1, 0)
    assert [w[0] for w in first.pop(2)] == [1, 2]
    first.push((6, "error", "invalid_url", None, None))  # after the disk's lines, so on disk
    assert [w[0] for w in first.pop(10)] == [3, 4, 5, 6]
    assert len(first) == 0 and budget.left == 3
    first.push((7, "error", "invalid_url", None, None))  # emptied: memory again
    assert [w[0] for w in first.pop(1) + second.pop(1)] == [7, 9]
    first.close()
    second.close()
    assert os.listdir(tmp_path) == []  # unnamed files


def test_every_host_is_served_by_one_worker(ray_address: str, hosts: Hosts, tmp_path: Path) -> None:
    while len({shard_of(h, WORKERS) for h in hosts.live_hosts}) < WORKERS:
        hosts.add_live()
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    total = 400
    where = write_input(src, hosts.live_hosts, total)
    run = options(src, out, summary_json=str(tmp_path / "summary.json"))
    summary = corun.run(run_fetch(run, backend=RayBackend(run, workers=WORKERS)))
    assert summary.complete
    records = assert_one_line_each(out, total)
    assert all(r["status"] == 200 and r["body"] == f"ok {r['line']}" for r in records)
    pids: dict[str, set[int | None]] = {}
    for host, line, pid in hosts.requests:
        assert where[line] == host
        pids.setdefault(host, set()).add(pid)
    assert set(pids) == set(hosts.live_hosts)
    assert all(len(owners) == 1 for owners in pids.values()), pids
    owners = {next(iter(owners)) for owners in pids.values()}
    assert None not in owners and os.getpid() not in owners
    assert len(owners) == WORKERS  # the hosts are spread, and the driver fetched nothing
    data = json.loads((tmp_path / "summary.json").read_text())
    workers = data["workers"]
    assert [w["id"] for w in workers] == list(range(WORKERS))
    assert sum(w["lines"] for w in workers) == total
    for w in workers:
        mine = [h for h in hosts.live_hosts if shard_of(h, WORKERS) == w["id"]]
        assert w["hosts"] == len(mine)
        assert w["lines"] == sum(1 for h in where.values() if h in mine)
        assert w["requests_per_s"] > 0 and w["restarts"] == 0


class KillWorker0:
    """An ``on_progress`` hook: ``ray.kill`` worker 0 (restartable) once ``at`` lines are
    done, and again each time the driver has seen it restarted, ``times`` times in all."""

    def __init__(self, backend: RayBackend, *, at: int, times: int) -> None:
        self.backend, self.at, self.times = backend, at, times
        self.kills: list[int] = []

    def __call__(self, state: ProgressState) -> None:
        import ray

        workers = self.backend.statistics().workers
        assert workers is not None
        if len(self.kills) == workers[0].restarts < self.times and state.done >= self.at:
            self.kills.append(state.done)
            ray.kill(self.backend.actor(0), no_restart=False)


def two_hosts_per_worker(served: Hosts) -> list[str]:
    """Two live hosts for each worker, more started until the hash gives them.

    The ports, and so the shards, differ from run to run: with the fixture's
    four hosts alone, worker 0 may have none (and is never called again after
    a kill), or one that it finishes before the kill.
    """
    by_worker: dict[int, list[str]] = {worker: [] for worker in range(WORKERS)}
    for host in served.live_hosts:
        by_worker[shard_of(host, WORKERS)].append(host)
    while any(len(hosts) < 2 for hosts in by_worker.values()):
        host = served.add_live()
        by_worker[shard_of(host, WORKERS)].append(host)
    return [host for hosts in by_worker.values() for host in hosts[:2]]


@pytest.fixture
def slow_hosts() -> Iterator[Hosts]:
    served = Hosts(4, delay=0.01)
    yield served
    served.close()


def test_a_killed_worker_is_restarted_and_nothing_is_lost_or_doubled(
    ray_address: str, slow_hosts: Hosts, tmp_path: Path
) -> None:
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    total = 1500
    write_input(src, two_hosts_per_worker(slow_hosts), total)
    run = options(src, out, concurrency=8)
    backend = RayBackend(run, workers=WORKERS)
    killer = KillWorker0(backend, at=total // 4, times=1)
    summary = corun.run(run_fetch(run, backend=backend, on_progress=killer))
    assert len(killer.kills) == 1 and killer.kills[0] < total
    assert summary.complete and summary.by_status == {"200": total}
    records = assert_one_line_each(out, total)
    assert all(r["body"] == f"ok {r['line']}" for r in records)
    assert summary.workers is not None
    assert [w.restarts for w in summary.workers] == [1, 0]
    assert sum(w.lines for w in summary.workers) == total
    # Every line was requested; some twice (those the killed worker had in flight).
    assert set(slow_hosts.lines_requested()) == set(range(1, total + 1))


def test_a_worker_that_keeps_dying_fails_the_run_and_keeps_the_journal(
    ray_address: str, slow_hosts: Hosts, tmp_path: Path
) -> None:
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    total = 2000
    write_input(src, two_hosts_per_worker(slow_hosts), total)
    run = options(src, out, concurrency=8)
    backend = RayBackend(run, workers=WORKERS, max_restarts=1)
    killer = KillWorker0(backend, at=total // 4, times=2)
    with pytest.raises(
        ClusterError,
        match=r"^worker 0 kept dying: Ray restarted it 1 times and it died again .*"
        r"; the journal keeps every recorded line, re-run to resume$",
    ):
        corun.run(run_fetch(run, backend=backend, on_progress=killer))
    assert len(killer.kills) == 2
    assert not out.exists()
    db = sqlite3.connect(journal_path(str(out)))
    recorded = {row[0] for row in db.execute("SELECT line FROM results")}
    db.close()
    assert total // 4 <= len(recorded) < total
    # The journal is intact: a re-run fetches only the rest.
    before = len(slow_hosts.requests)
    summary = corun.run(run_fetch(run, backend=RayBackend(run, workers=WORKERS)))
    assert summary.complete
    assert_one_line_each(out, total)
    again = {line for _host, line, _pid in slow_hosts.requests[before:]}
    assert again == set(range(1, total + 1)) - recorded


def test_a_dead_host_does_not_stall_the_other_shards(ray_address: str, tmp_path: Path) -> None:
    served = Hosts(0, dead=True)
    try:
        dead_shard = shard_of(served.dead_host, WORKERS)
        others = []
        while len(others) < 3:
            host = served.add_live()
            if shard_of(host, WORKERS) != dead_shard:
                others.append(host)
        src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
        # The dead host's lines come first, more than its shard's window holds.
        dead_lines, live_lines = 600, 300
        with src.open("w") as stream:
            for line in range(1, dead_lines + 1):
                stream.write(f"http://{served.dead_host}/ok?n={line}\n")
            for line in range(dead_lines + 1, dead_lines + live_lines + 1):
                stream.write(f"http://{others[line % 3]}/ok?n={line}\n")
        # The dead host's breaker opens on its first 503s and never lets a probe
        # through; its lines are deferred, then given up after --host-give-up.
        run = options(
            src,
            out,
            retries=0,
            per_host=4,
            breaker_min_calls=3,
            breaker_open_duration=600.0,
            host_give_up=1.0,
            read_timeout=120.0,
            total_timeout=120.0,
        )
        # A small window and backlog memory: the dead host's lines spill to disk.
        backend = RayBackend(run, workers=WORKERS, window=256, backlog_memory=100)
        live_done_first: list[bool] = []

        def watch() -> None:
            # Release the dead host once every live line is fetched (or give up).
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if len(served.lines_requested()) >= live_lines:
                    live_done_first.append(True)
                    break
                time.sleep(0.05)
            served.set_release()

        watcher = threading.Thread(target=watch)
        watcher.start()
        summary = corun.run(run_fetch(run, backend=backend))
        watcher.join()
        assert live_done_first == [True]  # the live shard never waited for the dead host
        assert summary.complete
        records = assert_one_line_each(out, dead_lines + live_lines)
        assert all(r["status"] == 200 for r in records[dead_lines:])
        assert all(
            r["status"] == 503 or r["error_kind"] == "host_unavailable"
            for r in records[:dead_lines]
        )
        assert summary.breaker_trips >= 1
        assert summary.by_error.get("host_unavailable", 0) > dead_lines // 2
        assert summary.hosts[served.dead_host]["unavailable"] is True
    finally:
        served.close()


def test_the_workers_run_the_engine_s_per_host_policies(ray_address: str, tmp_path: Path) -> None:
    # The same engine as on one machine: Retry-After pauses a host and defers
    # its lines (no retry spent, no breaker failure), each host's limit
    # adapts, and the summary reports them per host, summed over workers.
    servers = [Patience(), Patience()]
    paths = [f"/flaky/{i}" for i in range(60)] + [f"/ok/{i}" for i in range(60)]
    for i in range(3):
        paths.insert(i * 41, f"/limited/{i}")
    with AppThread(servers[0].make_app) as first, AppThread(servers[1].make_app) as second:
        urls = [f"{app.base}{path}" for path in paths for app in (first, second)]
        src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
        src.write_text("".join(f"{url}\n" for url in urls))
        run = options(src, out, retries=0, concurrency=8)
        summary = corun.run(run_fetch(run, backend=RayBackend(run, workers=WORKERS)))
        keys = [app.base.removeprefix("http://") for app in (first, second)]
    assert summary.complete and summary.by_error == {} and summary.breaker_trips == 0
    records = assert_one_line_each(out, len(urls))
    expected_attempts = {"flaky": 3, "limited": 2, "ok": 1}
    for record in records:
        path = record["url"].split("/", 3)[3]
        assert (record["status"], record["error"]) == (200, None), record
        # retries=0: every attempt beyond the first was a host's request for patience.
        assert record["attempts"] == expected_attempts[path.split("/")[0]], record
    # Nothing fetched twice.
    assert sum(sum(s.hits.values()) for s in servers) == sum(r["attempts"] for r in records)
    assert summary.host_pauses >= 2 * 3 and summary.deferred > 0
    assert set(summary.hosts) == set(keys)  # one entry per host:port, not per URL
    for key in keys:
        report = summary.hosts[key]
        assert report["requests"] == len(paths) + 60 * 2 + 3
        assert report["pauses"] >= 3 and report["decreases"] >= 1 and not report["unavailable"]
    assert summary.workers is not None
    assert sum(w.lines for w in summary.workers) == len(urls)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "corun", "fetch", *args]


def _journal_rows(path: str) -> set[int]:
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            return {row[0] for row in db.execute("SELECT line FROM results")}
        finally:
            db.close()
    except sqlite3.Error:
        return set()


def _start_until(command: list[str], jpath: str, rows: int) -> subprocess.Popen[bytes]:
    """Start ``command``; return once its journal holds ``rows`` rows."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while len(_journal_rows(jpath)) < rows:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc


def test_sigterm_then_sigkill_of_the_driver_then_rerun_fetches_only_what_is_missing(
    ray_address: str, tmp_path: Path
) -> None:
    served = Hosts(4, delay=0.005)
    try:
        src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
        total = 3000
        write_input(src, served.live_hosts, total)
        jpath = journal_path(str(out))
        command = _cli(
            str(src), "-o", str(out), "--ray", ray_address, "--workers", "2",
            "--concurrency", "8", "--no-rate-limit", "--no-progress",
        )  # fmt: skip
        # SIGTERM: a graceful stop (Ray's own SIGTERM handler must not take over).
        first = _start_until(command, jpath, 300)
        first.send_signal(signal.SIGTERM)
        _stdout, stderr = first.communicate(timeout=30)
        assert first.returncode == 130, stderr
        after_term = len(_journal_rows(jpath))
        assert f"fetch interrupted: {after_term}/{total} lines".encode() in stderr
        # SIGKILL: no chance to clean up.
        second = _start_until(command, jpath, after_term + 300)
        second.send_signal(signal.SIGKILL)
        second.wait(10)
        assert not out.exists()
        recorded = _journal_rows(jpath)
        assert after_term + 300 <= len(recorded) < total
        before = len(served.requests)
        third = subprocess.run(command, capture_output=True, timeout=180)
        assert third.returncode == 0, third.stderr
        records = assert_one_line_each(out, total)
        assert all(r["status"] == 200 and r["body"] == f"ok {r['line']}" for r in records)
        again = [line for _host, line, _pid in served.requests[before:]]
        # Nothing recorded was fetched again. (A line may be fetched twice: the
        # killed driver's workers live on for a moment, with lines in flight.)
        assert not set(again) & recorded
        assert set(again) == set(range(1, total + 1)) - recorded
        assert b"worker 0:" in third.stderr and b"worker 1:" in third.stderr
    finally:
        served.close()


@needs_ray
@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("127.0.0.1:1", "cannot reach the Ray cluster at 127.0.0.1:1: "),
        ("nowhere", "bad Ray address 'nowhere': expected auto, HOST:PORT or ray://HOST:PORT"),
    ],
)
def test_a_bad_address_is_one_line_and_exit_1(tmp_path: Path, address: str, message: str) -> None:
    src = tmp_path / "in.txt"
    src.write_text("http://127.0.0.1:9/\n")
    done = subprocess.run(
        _cli(str(src), "-o", str(tmp_path / "o.jsonl"), "--ray", address, "--no-progress"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith(f"corun fetch: {message}")


@needs_ray
def test_a_port_that_is_not_ray_is_one_line_and_exit_1(hosts: Hosts, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("http://127.0.0.1:9/\n")
    address = hosts.live_hosts[0]
    done = subprocess.run(
        _cli(str(src), "-o", str(tmp_path / "o.jsonl"), "--ray", address, "--no-progress"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"corun fetch: no Ray cluster answers at {address}"]


def test_without_ray_installed_says_how_to_install_it(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("http://127.0.0.1:9/\n")
    program = (
        "import sys; sys.modules['ray'] = None  # as if not installed\n"
        "from corun.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    output = str(tmp_path / "o.jsonl")
    command = [sys.executable, "-c", program, "fetch", str(src), "-o", output, "--ray"]
    done = subprocess.run(
        [*command, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    # Where Ray has no build, installing the extra would not help: it says that.
    expected = INSTALL_HINT if RAY_BUILT else NO_BUILD
    assert done.stderr.splitlines() == [f"corun fetch: {expected}"]
    assert "pip install 'corun[ray]'" in INSTALL_HINT


def test_ray_is_there_exactly_where_it_has_a_build(tmp_path: Path) -> None:
    """The dev extra installs Ray up to 3.14; on 3.15 ``--ray`` says, in one line, why not."""
    import importlib.util

    if RAY_BUILT:
        assert sys.version_info < (3, 15)
        assert importlib.util.find_spec("ray") is not None
        return
    assert sys.version_info >= (3, 15)
    assert importlib.util.find_spec("ray") is None
    src = tmp_path / "in.txt"
    src.write_text("http://127.0.0.1:9/\n")
    done = subprocess.run(
        _cli(str(src), "-o", str(tmp_path / "o.jsonl"), "--ray", "--no-progress"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert done.stderr.splitlines() == [
        f"corun fetch: --ray needs Ray, which has no build for Python {version}"
    ]


def test_workers_needs_ray(tmp_path: Path) -> None:
    done = subprocess.run(
        _cli("in.txt", "-o", str(tmp_path / "o.jsonl"), "--workers", "2"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["corun fetch: --workers needs --ray"]
