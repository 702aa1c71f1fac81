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

Shape: as in Polly v8, the stages are linked once, when the pipeline is
built: each policy becomes a ``_Link`` that holds the link inside it, and a
call walks that chain. A link is not a coroutine of its own (it returns its
policy's awaitable), so the chain adds no frame to resume at a suspension.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any, TypeVar, final

from corun.resilience.clock import Clock
from corun.resilience.events import Listener
from corun.resilience.policy import Policy, PolicyBase, PolicyDescription

T = TypeVar("T")


@final
class _Link:
    """One stage of a built pipeline: its policy, run around the stage inside it."""

    __slots__ = ("_execute", "_inner", "_run")

    def __init__(self, policy: Policy, inner: _Link | None, *, timed: bool) -> None:
        self._inner = inner
        self._execute: Callable[..., Awaitable[Any]] = policy.execute
        # Untimed: straight to the policy's own step, skipping the
        # ``call_finished`` bookkeeping that ``PolicyBase.execute`` adds.
        self._run: Callable[..., Awaitable[Any]] | None = None
        if not timed and isinstance(policy, PolicyBase):
            self._run = policy._run

    def __call__(
        self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], key: Hashable
    ) -> Awaitable[T]:
        inner = self._inner
        if inner is not None:
            fn, args = inner, (fn, args, key)
        if self._run is not None:
            return self._run(fn, args, key)
        return self._execute(fn, *args, key=key)


class Pipeline(PolicyBase):
    """Several policies run as one, the first given outermost.

    Args:
        *policies: the policies, outermost first (at least one). A pipeline
            is a policy too, so pipelines nest, and one policy may sit in
            several pipelines (to share its state).
        name: the name in its own ``call_finished`` events.
        clock: the clock that times ``call_finished`` (default
            ``SystemClock``; give it the policies' clock).
        listeners: listeners of the pipeline's own events (``call_finished``).
            Use ``add_listener`` to listen to every policy inside as well.
        time_policies: False: the ``PolicyBase`` policies inside report no
            ``call_finished`` of their own when run by this pipeline (their
            other events still go out), which saves two clock reads a
            stage. The pipeline's own ``call_finished`` is unaffected.
    """

    kind = "pipeline"

    def __init__(
        self,
        *policies: Policy,
        name: str | None = None,
        clock: Clock | None = None,
        listeners: Iterable[Listener] = (),
        time_policies: bool = True,
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
        link: _Link | None = None
        for policy in reversed(policies):  # innermost first: each link holds the next one in
            link = _Link(policy, link, timed=time_policies)
        assert link is not None
        self._head: _Link = link

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

    def _run(
        self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], key: Hashable
    ) -> Awaitable[T]:
        return self._head(fn, args, key)
