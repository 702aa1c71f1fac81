"""``Pipeline``: policies composed into one; the first one added is the outermost.

``Pipeline(a, b, c).execute(fn, *args, key=k)`` runs
``a.execute(b.execute(c.execute(fn, *args)))``, as Polly's pipelines do::

    caller ──▶ a ──▶ b ──▶ c ──▶ fn
    caller ◀── a ◀── b ◀── c ◀── fn   (results and exceptions go back out)

So each policy sees what the policies inside it do as one call. Where a
policy sits decides what it governs:

* ``Timeout(overall=True)`` outermost bounds everything, backoff included;
  ``Timeout()`` innermost (inside ``Retry``) bounds each attempt, and its
  ``AttemptTimeout`` is retryable.
* ``Retry`` outside ``Breaker``: each attempt asks the breaker, and
  ``BreakerOpen`` is not retried by default (it is not an ``OSError``), so
  an open breaker ends the retries at once.
* ``RateLimiter`` and ``Bulkhead`` inside ``Retry`` meter attempts, which is
  what the dependency sees; outside they meter calls. A bulkhead inside
  ``Retry`` holds no slot during backoff sleeps.
* ``Hedge`` inside ``Retry``: each attempt may be hedged; a hedged attempt's
  attempt timeout must be inside the ``Hedge`` to apply to each copy.

A typical stack, outermost first::

    Pipeline(
        Timeout(TimeoutOptions(10.0, overall=True)),
        Retry(RetryOptions(max_attempts=3), budget=budget),
        Breaker(BreakerOptions()),
        Bulkhead(BulkheadOptions(max_concurrent=50, max_queue=100)),
        Timeout(TimeoutOptions(2.0)),
    )

The ``key`` of a call is passed to every policy. ``describe()`` returns the
structure (Polly.Testing's ``GetPipelineDescriptor``) for tests to assert on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any, TypeVar

from corun.resilience.clock import Clock
from corun.resilience.events import Listener
from corun.resilience.policy import Policy, PolicyBase, PolicyDescription

T = TypeVar("T")


class Pipeline(PolicyBase):
    """Several policies run as one, the first given outermost.

    Args:
        *policies: the policies, outermost first (at least one). A pipeline
            is a policy too, so pipelines nest.
        name: the name in its own ``call_finished`` events.
        clock: the clock that times ``call_finished`` (default
            ``SystemClock``; give it the policies' clock).
        listeners: listeners of the pipeline's own events (``call_finished``).
            Use ``add_listener`` to listen to every policy inside as well.
    """

    kind = "pipeline"

    def __init__(
        self,
        *policies: Policy,
        name: str | None = None,
        clock: Clock | None = None,
        listeners: Iterable[Listener] = (),
    ) -> None:
        if not policies:
            raise ValueError("a Pipeline needs at least one policy")
        seen: set[int] = set()
        for policy in policies:
            if not (
                callable(getattr(policy, "execute", None))
                and callable(getattr(policy, "describe", None))
            ):
                raise TypeError(f"not a policy: {policy!r}")
            if id(policy) in seen:
                raise ValueError(f"{policy!r} appears twice in the pipeline")
            seen.add(id(policy))
        super().__init__(name=name, clock=clock, listeners=listeners)
        self.policies: tuple[Policy, ...] = policies

    def describe(self) -> PolicyDescription:
        """The pipeline and its policies, outermost first, with their options."""
        return PolicyDescription(
            kind=self.kind,
            name=self.name,
            options=None,
            children=tuple(policy.describe() for policy in self.policies),
        )

    def add_listener(self, listener: Listener) -> None:
        """Register ``listener`` on the pipeline and on every policy in it."""
        super().add_listener(listener)
        for policy in self.policies:
            policy.add_listener(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Unregister ``listener`` from the pipeline and from every policy in it that has it."""
        super().remove_listener(listener)
        for policy in self.policies:
            remove = getattr(policy, "remove_listener", None)
            if remove is not None:
                try:
                    remove(listener)
                except KeyError:
                    pass  # registered on the pipeline only

    async def _run(
        self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], key: Hashable
    ) -> T:
        return await self._stage(0, fn, args, key)

    async def _stage(
        self, index: int, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], key: Hashable
    ) -> T:
        # Policy ``index`` runs the rest of the pipeline as its callable; a
        # bound method and its arguments, not a closure per call.
        policy = self.policies[index]
        if index + 1 == len(self.policies):
            return await policy.execute(fn, *args, key=key)
        return await policy.execute(self._stage, index + 1, fn, args, key, key=key)
