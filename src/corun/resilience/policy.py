"""What every policy has in common: the call protocol, decorators, events, description.

A policy runs an awaitable callable on the caller's behalf:

    result = await policy.execute(fn, *args, key="api.example.com")

``fn(*args)`` is called (maybe several times, maybe never) and its result
returned or its exception raised, as the policy decides. Keyword arguments
for ``fn`` go through ``functools.partial``; the keyword-only ``key`` is for
the policy: per-key policies (``Breaker``, ``RateLimiter``) keep separate
state per key, and every policy puts it into its events.

Every policy is also a decorator (``@policy``, or ``policy.wrap(fn,
key=...)`` for a fixed key), and those that can guard a block of code
without re-running it also give an async context manager from ``scope()``.
``Retry`` cannot re-run a ``with`` block, so it offers ``attempts()``
instead; ``Hedge`` must start the callable twice, so it has no block form.

Policies compose with ``corun.resilience.Pipeline``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable
from dataclasses import dataclass
from typing import (
    Any,
    ClassVar,
    ParamSpec,
    Protocol,
    TypedDict,
    TypeVar,
    TypeVarTuple,
    Unpack,
)

from corun.resilience.clock import SYSTEM_CLOCK, Clock
from corun.resilience.errors import CallRejected
from corun.resilience.events import CallFinished, Hooks, Listener, Outcome, Rejected, RejectReason

T = TypeVar("T")
R = TypeVar("R", bound=CallRejected)
P = ParamSpec("P")
Ts = TypeVarTuple("Ts")


@dataclass(frozen=True, slots=True)
class PolicyDescription:
    """A structured description of a policy, for tests and logs (as Polly.Testing).

    Attributes:
        kind: ``"retry"``, ``"breaker"``, ``"bulkhead"``, ``"rate_limiter"``,
            ``"hedge"``, ``"timeout"`` or ``"pipeline"``.
        name: the instance's name (events carry it as ``policy``).
        options: the policy's frozen options; ``None`` for a pipeline.
        children: for a pipeline, its policies from the outermost inwards.
    """

    kind: str
    name: str
    options: object = None
    children: tuple[PolicyDescription, ...] = ()


class Policy(Protocol):
    """The protocol ``Pipeline`` composes: anything with these members is a policy."""

    @property
    def name(self) -> str:
        """The instance's name."""
        ...

    async def execute(
        self, fn: Callable[[Unpack[Ts]], Awaitable[T]], /, *args: *Ts, key: Hashable = None
    ) -> T:
        """Run ``fn(*args)`` under the policy."""
        ...

    def describe(self) -> PolicyDescription:
        """A structured description."""
        ...

    def add_listener(self, listener: Listener) -> None:
        """Register a listener for this policy's events."""
        ...


def outcome_of(exc: BaseException | None) -> Outcome:
    """How a call that raised ``exc`` (None: returned) ended, for ``CallFinished``."""
    if exc is None:
        return "success"
    if isinstance(exc, CallRejected):
        return "rejected"
    if isinstance(exc, Exception):
        return "failure"
    return "cancelled"


class PolicyArgs(TypedDict, total=False):
    """The keyword arguments every policy takes, besides its options.

    Attributes:
        name: the instance's name, ``policy`` in its events and errors
            (default: its ``kind``).
        clock: the clock it reads and sleeps on (default ``SystemClock``).
        listeners: ``Listener`` objects for its events.
    """

    name: str | None
    clock: Clock | None
    listeners: Iterable[Listener]


class PolicyBase:
    """The shared half of every policy: options, name, clock, hooks, decorators, timing.

    Subclasses set ``kind`` and implement ``_run``. ``execute`` adds the
    ``call_finished`` event around it, and costs nothing extra when no
    listener wants that event.
    """

    kind: ClassVar[str] = "policy"

    def __init__(
        self,
        options: object = None,
        *,
        name: str | None = None,
        clock: Clock | None = None,
        listeners: Iterable[Listener] = (),
    ) -> None:
        if name is not None and not (isinstance(name, str) and name):
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must implement corun.resilience.Clock, got {clock!r}")
        #: The policy's frozen options (None for a pipeline).
        self.options = options
        self._name = name if name is not None else self.kind
        self.clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self.hooks = Hooks(listeners)

    @property
    def name(self) -> str:
        """The instance's name, used as ``policy`` in its events and errors."""
        return self._name

    def add_listener(self, listener: Listener) -> None:
        """Register ``listener`` for this policy's events (once)."""
        self.hooks.add(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Unregister ``listener``.

        Raises:
            KeyError: it was not registered.
        """
        self.hooks.remove(listener)

    def describe(self) -> PolicyDescription:
        """A structured description: kind, name and options."""
        return PolicyDescription(kind=self.kind, name=self._name, options=self.options)

    def _refused(self, error: R, reason: RejectReason, now: float | None = None) -> R:
        """Report the refusal ``error`` to ``rejected`` listeners; returns it, to be raised.

        ``now`` is the time of the refusal (default: the clock's now).
        """
        hooks = self.hooks
        if hooks.rejected:
            event = Rejected(
                policy=self._name,
                key=error.key,
                at=self.clock.now() if now is None else now,
                reason=reason,
                retry_in=error.retry_in,
            )
            hooks.emit("rejected", hooks.rejected, event)
        return error

    async def execute(
        self, fn: Callable[[Unpack[Ts]], Awaitable[T]], /, *args: *Ts, key: Hashable = None
    ) -> T:
        """Run ``fn(*args)`` under this policy and return its result.

        Args:
            fn: an async function (or any callable returning an awaitable).
            *args: positional arguments for ``fn``.
            key: what per-key state to use (a host name, say); also reported
                in events and errors.

        Returns:
            What ``fn`` returned, as the policy lets it through.

        Raises:
            Whatever ``fn`` raised, as the policy lets it through, and the
            policy's own ``CallRejected`` or ``TimeoutError`` subclasses.
        """
        subscribers = self.hooks.call_finished
        if not subscribers:
            return await self._run(fn, args, key)
        clock = self.clock
        started = clock.now()
        error: BaseException | None = None
        try:
            return await self._run(fn, args, key)
        except BaseException as exc:
            error = exc
            raise
        finally:
            end = clock.now()
            event = CallFinished(
                policy=self._name,
                key=key,
                at=end,
                kind=self.kind,
                duration=end - started,
                outcome=outcome_of(error),
            )
            error = None  # breaks a reference cycle through the traceback
            self.hooks.emit("call_finished", subscribers, event)

    def _run(
        self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], key: Hashable
    ) -> Awaitable[T]:
        """The policy proper: run ``fn(*args)``; subclasses implement it (as ``async def``)."""
        raise NotImplementedError

    def __call__(self, fn: Callable[P, Awaitable[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        """Use the policy as a decorator: ``@policy`` over an async function."""
        return self.wrap(fn)

    def wrap(
        self, fn: Callable[P, Awaitable[T]], *, key: Hashable = None
    ) -> Callable[P, Coroutine[Any, Any, T]]:
        """``fn`` with every call run through this policy, with a fixed ``key``."""

        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            return await self.execute(functools.partial(fn, *args, **kwargs), key=key)

        return wrapper

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name!r} {self.options!r}>"
