"""Retry-After: delay-seconds, HTTP dates against an injected wall clock, bounds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from corun.resilience import Retry, RetryOptions, parse_retry_after, retry_after_delay
from corun.testing import MockClock

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC).timestamp()


def http_date(seconds_from_now: float) -> str:
    return format_datetime(datetime.fromtimestamp(NOW + seconds_from_now, tz=UTC), usegmt=True)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        ("1.5", 1.5),
        (http_date(90), 90.0),
        (http_date(-30), 0.0),  # in the past: now
        ("Sun, 01 Mar 2026 12:01:00 GMT", 60.0),
        ("Sunday, 01-Mar-26 12:01:00 GMT", 60.0),  # RFC 850, obsolete but allowed
        ("Sun Mar  1 12:01:00 2026", 60.0),  # asctime, no zone: GMT
        ("-5", None),
        ("soon", None),
        ("", None),
        ("1e3", None),
        ("Sun, 99 Foo 2026 25:61:00 GMT", None),
    ],
)
def test_parse_retry_after(value: str, expected: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected


@pytest.fixture
def far_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone set to UTC-5 for the test, then restored."""
    monkeypatch.setenv("TZ", "EST+05")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_dates_without_a_zone_are_gmt_whatever_the_local_zone(far_from_utc: None) -> None:
    assert time.timezone == 5 * 3600  # the fixture took effect
    assert parse_retry_after("Sun Mar  1 12:01:00 2026", NOW) == 60.0
    assert parse_retry_after("Sun, 01 Mar 2026 12:01:00 -0000", NOW) == 60.0


def test_header_lookup_is_case_insensitive_and_capped() -> None:
    assert retry_after_delay({"Retry-After": "30"}, NOW) == 30.0
    assert retry_after_delay({"retry-after": "30"}, NOW) == 30.0
    assert retry_after_delay({"RETRY-AFTER": http_date(600)}, NOW, max_delay=120) == 120.0
    assert retry_after_delay({"Content-Type": "text/plain"}, NOW) is None
    assert retry_after_delay({"Retry-After": "garbage"}, NOW) is None


def test_retry_honours_a_date_from_the_mock_wall_clock(run, clock: MockClock) -> None:
    # An HTTP-date is wall time: the hook reads the mock clock's wall time,
    # which moves with the virtual time.
    wall_clock = MockClock(autojump=True, wall_start=NOW)
    responses = [
        (503, {"Retry-After": http_date(45)}),
        (503, {"Retry-After": "5000"}),  # capped at max_server_delay
        (200, {}),
    ]
    started: list[float] = []

    async def fetch() -> tuple[int, dict[str, str]]:
        started.append(wall_clock.now())
        return responses[len(started) - 1]

    retry = Retry(
        RetryOptions(
            max_attempts=3,
            retry_on_result=lambda r: r[0] == 503,
            delay_from=lambda r: retry_after_delay(r[1], wall_clock.wall()),  # type: ignore[index]
            max_server_delay=300.0,
        ),
        clock=wall_clock,
    )
    assert run(retry.execute(fetch))[0] == 200
    assert started == [0.0, 45.0, 345.0]
