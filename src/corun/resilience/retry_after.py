"""Parse an HTTP ``Retry-After`` into a delay in seconds, for ``RetryOptions.delay_from``.

RFC 9110 §10.2.3 allows two forms:

* ``Retry-After: 120``: delay-seconds, a non-negative integer. (We also
  accept a decimal such as ``1.5``, which some servers send.)
* ``Retry-After: Wed, 21 Oct 2015 07:28:00 GMT``: an HTTP-date. It is *wall*
  time, so turning it into a delay needs the wall clock, which a monotonic
  ``Clock`` cannot give. These helpers therefore take ``now``, the wall time
  in seconds since the epoch, from the caller: ``time.time()`` (or
  ``SystemClock().wall()``) in production, ``MockClock.wall()`` in tests.
  They never read the system time themselves.

A date in the past means "now" (0.0). Anything unparsable is ignored
(None), as RFC 9110 asks of a recipient. Bounding is the caller's job:
``max_delay`` here, or ``RetryOptions.max_server_delay`` in ``Retry``.

This module is pure string handling; it does not import any HTTP library.
``corun.http`` wires it up roughly as::

    RetryOptions(
        retry_on_result=lambda r: r.status in (429, 503),
        delay_from=lambda r: (
            retry_after_delay(r.headers, clock.wall()) if hasattr(r, "headers") else None
        ),
    )
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Final

_SECONDS: Final = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def parse_retry_after(value: str, now: float) -> float | None:
    """The delay a ``Retry-After`` value asks for, in seconds from ``now``.

    Args:
        value: the header's value, either delay-seconds or an HTTP-date.
        now: the wall time, in seconds since the epoch (used for dates only).

    Returns:
        The delay (>= 0.0), or None when ``value`` is neither form.
    """
    text = value.strip()
    if _SECONDS.fullmatch(text):
        delay = float(text)
        return delay if math.isfinite(delay) else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        # RFC 9110 dates are always GMT; "-0000" parses as naive.
        when = when.replace(tzinfo=UTC)
    try:
        target = when.timestamp()
    except (OverflowError, OSError, ValueError):
        return None
    return max(0.0, target - now)


def retry_after_delay(
    headers: Mapping[str, str], now: float, *, max_delay: float | None = None
) -> float | None:
    """The delay asked for by the ``Retry-After`` header in ``headers``, if any.

    Args:
        headers: response headers. The name is looked up case-insensitively,
            so a plain ``dict`` works as well as a case-insensitive multidict.
        now: the wall time, in seconds since the epoch.
        max_delay: if given, the result is capped at this many seconds.

    Returns:
        The delay in seconds, or None without a valid ``Retry-After``.
    """
    value = headers.get("Retry-After")
    if value is None:
        for name, candidate in headers.items():
            if name.lower() == "retry-after":
                value = candidate
                break
        else:
            return None
    delay = parse_retry_after(value, now)
    if delay is not None and max_delay is not None:
        delay = min(delay, max_delay)
    return delay
