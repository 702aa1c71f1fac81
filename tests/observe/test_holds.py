"""How long the serving thread holds the loop up: CPU time between its pauses (``corun.observe.holds``)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import corun
from corun.observe import answers, holds
from corun.observe import enable as observe
from corun.runtime.engine.accounting import SLOTS


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_stretch_is_the_cpu_time_between_two_marks() -> None:
    measured = holds.start()
    _spin(0.03)
    holds.mark()
    assert measured.longest >= 0.03
    first = measured.longest
    time.sleep(0.1)  # waiting holds nothing up
    _spin(0.005)
    assert holds.stop() is measured
    assert measured.longest == first
    holds.mark()  # measuring has stopped: no effect
    assert measured.longest == first


def test_threads_are_measured_apart() -> None:
    measured = holds.start()
    seen: list[holds.Holds | None] = []

    def other() -> None:
        _spin(0.03)
        holds.mark()  # not measured in this thread
        seen.append(holds.stop())

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == [None]
    assert holds.stop() is measured
    assert measured.longest < 0.03


def test_a_dump_made_off_the_loop_pauses_every_millisecond_or_so() -> None:
    """A full recorder's dump, made by another thread, holds the loop a few ms at a time.

    The whole answer takes tens of milliseconds of CPU; its longest stretch
    must be a small part of it. Both are CPU time, so a busy machine does not
    change the ratio much: the bound is loose on purpose.
    """
    made: dict[str, float] = {}

    def dump(observer: corun.observe.Observer) -> None:
        measured = holds.start()
        started = time.thread_time()
        pieces = answers.dump_pieces([observer])
        made["cpu"] = time.thread_time() - started
        assert holds.stop() is measured
        made["longest"] = measured.longest
        made["events"] = len(json.loads(b"".join(pieces))["events"])

    async def main() -> None:
        observer = observe(asyncio.get_running_loop(), serve=False)
        try:
            for _ in range(SLOTS // 2_000 + 1):  # each task: a spawn and an exit
                await asyncio.gather(*(asyncio.sleep(0) for _ in range(1_000)))
            thread = threading.Thread(target=dump, args=(observer,))
            thread.start()
            while thread.is_alive():
                await asyncio.sleep(0.001)
            thread.join()
        finally:
            observer.close()

    corun.run(main())
    assert made["events"] >= SLOTS // 2
    assert made["cpu"] > 0
    assert made["longest"] < made["cpu"] / 4, made
