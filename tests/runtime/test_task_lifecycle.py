"""Millions of tasks created, weakly referenced and freed, on the build under test.

asyncio registers every task in a WeakSet. A compiled class whose weak
references are not cleared when it is freed (mypyc issue 1102) crashes the
interpreter at the next iteration of that set, so the work runs in a child
process: a crash is a failed test with the child's exit status, not a dead
test run. It also checks that nothing leaks: the registry empties and memory
stays flat from the first million to the second, with one task in 100
referring to itself through an attribute of the program's own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, json, sys, weakref
    import corun

    BATCH = 20_000
    TOTAL = int(sys.argv[1])

    def rss_kib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4

    finished = 0

    async def child(i):
        global finished
        if i % 100 == 0:
            # As programs do; a cycle only the collector frees (tasks[0] too).
            task = asyncio.current_task()
            task.me = task
            del task
        if i % 3 == 0:
            await asyncio.sleep(0)
        finished += 1
        return i

    async def main():
        loop = asyncio.get_running_loop()
        refs = []
        rss = []
        done = 0
        while done < TOTAL:
            tasks = [loop.create_task(child(i)) for i in range(BATCH)]
            refs.append(weakref.ref(tasks[0]))
            for _ in range(3):  # the tasks need two steps at most
                await asyncio.sleep(0)
            assert all(t.done() for t in tasks)
            del tasks
            # Iterating asyncio's WeakSet touches every weak reference.
            assert len(asyncio.all_tasks()) == 1
            done += BATCH
            if done % 1_000_000 == 0:
                gc.collect()
                rss.append(rss_kib())
        # The handle now running holds the last gather's future until this step
        # ends (on asyncio's loop too): let one step pass before counting.
        await asyncio.sleep(0)
        gc.collect()
        alive = sum(1 for r in refs if r() is not None)
        assert finished == TOTAL
        return {"tasks": done, "alive": alive, "rss_kib": rss,
                "compiled": corun.COMPILED, "task_type": type(asyncio.current_task()).__name__}

    print(json.dumps(corun.run(main())))
    """
)


@pytest.mark.timeout(300)
def test_two_million_tasks_are_created_and_freed() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, "2000000"],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, f"child died with {proc.returncode}: {proc.stderr[-2000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["tasks"] == 2_000_000
    assert report["task_type"] == "Task"
    assert report["alive"] == 0, "tasks outlived their last reference"
    first, second = report["rss_kib"]
    # Flat memory: the second million must not grow the heap by more than a few MiB.
    assert second - first < 8 * 1024, report
