"""RateLimiter: token buckets with rate and burst, per key and global."""

from __future__ import annotations

import asyncio

import pytest

from corun.resilience import RateLimited, RateLimiter, RateLimiterOptions, Rejected, TokenBucket
from corun.testing import EventRecorder, MockClock


async def ok() -> str:
    return "ok"


def test_token_bucket_rate_and_burst() -> None:
    bucket = TokenBucket(rate=2.0, burst=3, now=0.0)
    assert [bucket.wait_time(0.0) for _ in range(1)] == [0.0]
    for _ in range(3):
        assert bucket.wait_time(0.0) == 0.0
        bucket.take(0.0)
    assert bucket.wait_time(0.0) == 0.5  # one token per 0.5 s
    assert bucket.wait_time(0.5) == 0.0
    assert bucket.level(100.0) == 3.0  # never more than the burst


def test_burst_then_rate(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    limiter = RateLimiter(
        RateLimiterOptions(rate=2, burst=3), name="out", clock=clock, listeners=[recorder]
    )

    async def main() -> None:
        for _ in range(3):
            assert await limiter.execute(ok) == "ok"
        with pytest.raises(RateLimited) as info:
            await limiter.execute(ok)
        assert info.value.retry_in == 0.5
        assert info.value.scope == "global"
        assert str(info.value) == "rate limiter 'out': global limit reached; next token in 0.500 s"
        clock.advance(0.5)
        assert await limiter.execute(ok) == "ok"
        with pytest.raises(RateLimited):
            await limiter.execute(ok)
        # Over 10 s at 2/s, 20 more calls get through, no more.
        admitted = 0
        for _ in range(100):
            clock.advance(0.1)
            try:
                await limiter.execute(ok)
                admitted += 1
            except RateLimited:
                pass
        assert admitted == 20

    run(main())
    assert recorder.of_type(Rejected)[0].retry_in == 0.5
    stats = limiter.statistics()
    assert (stats.admitted, stats.rejected) == (24, 82)


def test_max_wait_waits_for_the_token_in_arrival_order(run, clock: MockClock) -> None:
    limiter = RateLimiter(RateLimiterOptions(rate=1, burst=1, max_wait=2.5), clock=clock)
    admitted: list[tuple[int, float]] = []

    async def call(n: int) -> None:
        await limiter.execute(ok)
        admitted.append((n, clock.now()))

    async def main() -> None:
        tasks = [asyncio.ensure_future(call(n)) for n in range(3)]
        await asyncio.sleep(0)
        # The 4th would wait 3 s > 2.5 s: rejected at once, nothing taken.
        with pytest.raises(RateLimited) as info:
            await limiter.execute(ok)
        assert info.value.retry_in == 3.0
        await asyncio.gather(*tasks)

    run(main())
    assert admitted == [(0, 0.0), (1, 1.0), (2, 2.0)]
    assert limiter.statistics().waited == 2


def test_per_key_buckets_are_separate(run, clock: MockClock) -> None:
    limiter = RateLimiter(RateLimiterOptions(per_key_rate=1, per_key_burst=2), clock=clock)

    async def main() -> None:
        for key in ("a", "b"):
            await limiter.execute(ok, key=key)
            await limiter.execute(ok, key=key)
        with pytest.raises(RateLimited) as info:
            await limiter.execute(ok, key="a")
        assert info.value.scope == "key"
        assert "for key 'a': per-key limit reached" in str(info.value)
        await limiter.execute(ok, key="c")

    run(main())
    assert limiter.statistics().keys == 3


def test_global_limit_applies_across_keys(run, clock: MockClock) -> None:
    limiter = RateLimiter(
        RateLimiterOptions(rate=1, burst=3, per_key_rate=10, per_key_burst=10), clock=clock
    )

    async def main() -> None:
        for key in ("a", "b", "c"):
            await limiter.execute(ok, key=key)
        with pytest.raises(RateLimited) as info:
            await limiter.execute(ok, key="d")
        assert info.value.scope == "global"
        # A rejection takes no token from either bucket.
        clock.advance(1)
        await limiter.execute(ok, key="d")

    run(main())
    assert limiter.statistics().global_tokens == 0.0


def test_a_cancelled_waiter_gives_its_token_back(run, clock: MockClock) -> None:
    limiter = RateLimiter(RateLimiterOptions(rate=1, burst=1, max_wait=10), clock=clock)

    async def main() -> None:
        await limiter.execute(ok)
        waiter = asyncio.ensure_future(limiter.execute(ok))
        await asyncio.sleep(0)
        assert limiter.statistics().global_tokens == -1.0  # reserved ahead
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert limiter.statistics().global_tokens == 0.0
        await limiter.execute(ok)
        assert clock.now() == 1.0  # waited one token, not two

    run(main())


def test_float_rounding_does_not_refuse_a_due_token(run, clock: MockClock) -> None:
    limiter = RateLimiter(RateLimiterOptions(rate=10, burst=1), clock=clock)

    async def main() -> None:
        for _ in range(50):
            await limiter.execute(ok)
            clock.advance(0.1)

    run(main())


def test_scope_and_decorator(run, clock: MockClock) -> None:
    limiter = RateLimiter(RateLimiterOptions(per_key_rate=1, per_key_burst=1), clock=clock)

    @limiter
    async def guarded() -> str:
        return "ok"

    async def main() -> None:
        async with limiter.scope(key="x"):
            pass
        with pytest.raises(RateLimited):
            async with limiter.scope(key="x"):
                raise AssertionError("not reached")
        assert await guarded() == "ok"
        with pytest.raises(RateLimited):
            await guarded()

    run(main())


def test_lru_bound_on_keys(run, clock: MockClock) -> None:
    limiter = RateLimiter(RateLimiterOptions(per_key_rate=1, max_keys=2), clock=clock)

    async def main() -> None:
        for key in range(5):
            await limiter.execute(ok, key=key)
        assert limiter.statistics().keys == 2
        await limiter.execute(ok, key=0)  # forgotten, so a full bucket again

    run(main())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "needs rate, per_key_rate or both"),
        ({"rate": 0}, "rate must be positive"),
        ({"rate": -1}, "rate must be between 0"),
        ({"rate": 1e9}, "rate must be between 0 and 1e\\+06"),
        ({"per_key_rate": 1, "burst": 3}, "burst needs rate"),
        ({"rate": 1, "burst": 0}, "burst must be between 1"),
        ({"per_key_rate": 1, "per_key_burst": 10**7}, "per_key_burst"),
        ({"rate": 1, "max_wait": -1}, "max_wait"),
        ({"rate": 1, "max_wait": 1e6}, "max_wait"),
        ({"rate": 1, "max_keys": 0}, "max_keys"),
    ],
)
def test_options_reject_bad_values(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RateLimiterOptions(**options)  # type: ignore[arg-type]


def test_options_default_burst_is_one_second_of_rate() -> None:
    assert RateLimiterOptions(rate=2.5).burst == 3
    assert RateLimiterOptions(rate=0.1).burst == 1
    assert RateLimiterOptions(per_key_rate=7).per_key_burst == 7
