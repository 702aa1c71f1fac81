"""Checks shared by every ``<Name>Options`` dataclass.

Every size and duration an option takes is bounded: a typo such as
``open_duration=3e9`` or ``max_queue=10**12`` is a ``ValueError`` with the
field's name, not a breaker that never closes or a queue that eats the heap.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final, TypeVar

Opts = TypeVar("Opts")

#: The longest duration any option accepts: one day.
MAX_SECONDS: Final = 86_400.0
#: The largest size (queue length, key count, burst, ...) any option accepts.
MAX_SIZE: Final = 1_000_000


def seconds(owner: str, field: str, value: object, *, allow_zero: bool = False) -> float:
    """``value`` as a float of seconds in (0, MAX_SECONDS] ([0, ...] with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{owner}.{field} must be a number of seconds, not {type(value).__name__}")
    v = float(value)
    low_ok = v >= 0.0 if allow_zero else v > 0.0
    if not (math.isfinite(v) and low_ok and v <= MAX_SECONDS):
        low = "0" if allow_zero else "a positive number"
        raise ValueError(
            f"{owner}.{field} must be between {low} and {MAX_SECONDS:g} seconds, got {value!r}"
        )
    return v


def count(owner: str, field: str, value: object, *, low: int = 1, high: int = MAX_SIZE) -> int:
    """``value`` as an int in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}.{field} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{owner}.{field} must be between {low} and {high}, got {value!r}")
    return value


def number(owner: str, field: str, value: object, *, low: float, high: float) -> float:
    """``value`` as a finite float in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{owner}.{field} must be a number, not {type(value).__name__}")
    v = float(value)
    if not (math.isfinite(v) and low <= v <= high):
        raise ValueError(f"{owner}.{field} must be between {low:g} and {high:g}, got {value!r}")
    return v


def ratio(owner: str, field: str, value: object, *, allow_zero: bool = False) -> float:
    """``value`` as a fraction in (0, 1] ([0, 1] with ``allow_zero``)."""
    v = number(owner, field, value, low=0.0, high=1.0)
    if v == 0.0 and not allow_zero:
        raise ValueError(f"{owner}.{field} must be a fraction in (0, 1], got {value!r}")
    return v


def exception_types(owner: str, field: str, value: object) -> tuple[type[BaseException], ...]:
    """A tuple of exception classes (one class is accepted and wrapped)."""
    if isinstance(value, type):
        value = (value,)
    if not isinstance(value, tuple) or not all(
        isinstance(t, type) and issubclass(t, BaseException) for t in value
    ):
        raise TypeError(
            f"{owner}.{field} must be an exception class, a tuple of them, or a predicate; "
            f"got {value!r}"
        )
    return value


def normalize(
    options: object, owner: str, field: str, check: Callable[..., object], **bounds: Any
) -> None:
    """Replace frozen ``options``' ``field`` by ``check(owner, field, value, **bounds)``.

    For the checks that return the value normalised (a float for an int, a
    tuple for one exception class), so that the options hold that form.
    """
    object.__setattr__(options, field, check(owner, field, getattr(options, field), **bounds))


def options(value: object, cls: type[Opts], *, required: bool = False) -> Opts:
    """``value``, checked to be a ``cls``; None gives the defaults, ``cls()``, unless ``required``."""
    if value is None and not required:
        return cls()
    if not isinstance(value, cls):
        raise TypeError(f"options must be {cls.__name__}, got {value!r}")
    return value
