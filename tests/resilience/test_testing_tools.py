"""corun.testing: set_testing, EventRecorder, TaskRecorder."""

from __future__ import annotations

import asyncio

import pytest

from corun.testing import EventRecorder, TaskRecorder, is_testing, set_testing


def test_set_testing_switches_and_restores() -> None:
    assert not is_testing()
    with set_testing(True, attempts=3):
        assert is_testing()
        with set_testing(False):
            assert not is_testing()
        assert is_testing()
    assert not is_testing()
    set_testing(True)
    assert is_testing()
    set_testing(False)
    assert not is_testing()


@pytest.mark.parametrize(
    ("testing", "attempts"), [(True, 0), (True, 101), (True, 2.0), (True, True), (False, 2)]
)
def test_set_testing_validates(testing: bool, attempts: object) -> None:
    with pytest.raises(ValueError, match="attempts"):
        set_testing(testing, attempts=attempts)  # type: ignore[arg-type]
    assert not is_testing()


def test_event_recorder_filters_by_type() -> None:
    from corun.resilience import GaveUp, Rejected

    recorder = EventRecorder()
    rejected = Rejected("p", None, 0.0, "bulkhead_full", None)
    gave_up = GaveUp("p", None, 0.0, 1, 0.0, "attempts", None, None)
    recorder.rejected(rejected)
    recorder.gave_up(gave_up)
    assert recorder.events == [rejected, gave_up]
    assert recorder.of_type(GaveUp) == [gave_up]
    recorder.clear()
    assert recorder.events == []


@pytest.mark.corun_only
def test_task_recorder_sees_a_task_life(loop: asyncio.AbstractEventLoop) -> None:
    recorder = TaskRecorder()
    loop.add_instrument(recorder)  # type: ignore[attr-defined]

    async def child() -> None:
        await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.create_task(child(), name="child")

    loop.run_until_complete(main())
    assert recorder.filter("child") == [
        "task_spawned",
        "before_task_step",
        "after_task_step",
        "before_task_step",
        "after_task_step",
        "task_exited",
    ]
