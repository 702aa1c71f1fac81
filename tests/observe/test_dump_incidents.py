"""``corun dump`` on a server's traffic: the incidents outlive 100,000 tasks' spawns and exits."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from observed_child import TIMEOUT, child_env, run_cli

from corun.runtime.engine.accounting import SLOTS

FLOODED = textwrap.dedent(
    """
    import asyncio, sys, time

    import corun

    async def victim():
        await asyncio.sleep(3600)

    async def blocker():
        time.sleep(0.3)  # the stall

    async def request():
        await asyncio.sleep(0)

    async def main():
        task = asyncio.create_task(victim(), name="victim")
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.create_task(blocker(), name="blocker")
        for _ in range(100):  # 100,000 short tasks after the stall: 200,000 events
            await asyncio.gather(*(request() for _ in range(1_000)))
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    corun.run(main())
    """
)


@pytest.fixture(scope="module")
def flooded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, dict[str, str]]]:
    xdg = tmp_path_factory.mktemp("xdg")
    xdg.chmod(0o700)
    env = child_env(xdg, CORUN_OBSERVE="1")
    proc = subprocess.Popen(
        [sys.executable, "-c", FLOODED],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == "ready\n", proc.stderr
        yield proc.pid, env
        proc.stdin.close()
        proc.wait(TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _dump(flooded: tuple[int, dict[str, str]], *args: str) -> str:
    pid, env = flooded
    result = run_cli("dump", str(pid), *args, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_stall_and_the_cancellation_outlive_the_traffic(
    flooded: tuple[int, dict[str, str]],
) -> None:
    document = json.loads(_dump(flooded, "--json"))
    kinds = [event["kind"] for event in document["events"]]
    assert kinds.count("spawn") + kinds.count("exit") >= SLOTS - 16  # the ring is full
    [stall] = [event for event in document["events"] if event["kind"] == "stall"]
    assert stall["text"].startswith("blocker @ ")
    [cancel] = [event for event in document["events"] if event["kind"] == "cancel"]
    assert cancel["text"].startswith("victim <- ")
    assert [s["task"] for s in document["stalls"]] == ["blocker"]
    times = [event["t"] for event in document["events"]]
    assert times == sorted(times)


def test_dump_stalls_shows_only_the_incidents(flooded: tuple[int, dict[str, str]]) -> None:
    lines = _dump(flooded, "--stalls").splitlines()
    assert lines[0].endswith(": 1 stall, 2 events")
    assert lines[3].split("  ")[2].startswith("blocker blocked the loop for ")
    events = lines[lines.index("events (oldest first):") + 1 :]
    assert [line.split()[1] for line in events if not line.startswith("      ")] == [
        "cancel",
        "stall",
    ]


def test_dump_limit_and_since(flooded: tuple[int, dict[str, str]]) -> None:
    # The rings' occupancy is read, not assumed: a window's summary written
    # while the answer is read overwrites (and so drops) one spawn or exit.
    incidents = json.loads(_dump(flooded, "--stalls", "--json"))["events"]
    assert len(incidents) >= 2  # the cancellation and the stall
    newest = _dump(flooded, "--limit", "5").splitlines()
    header = newest[0].split(": ")[1]
    assert header.startswith("1 stall, 5 events of ")
    held = int(header.rsplit(" ", 1)[1])
    assert SLOTS - 16 + len(incidents) <= held <= SLOTS + len(incidents), header
    assert len(newest) == newest.index("events (oldest first):") + 6
    assert (
        _dump(flooded, "--since", "0.001", "--stalls")
        .splitlines()[0]
        .endswith(f": 0 stalls, 0 events of {len(incidents)}")
    )
