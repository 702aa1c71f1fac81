"""The I/O backend: readiness of file descriptors, on Linux epoll.

Some facts about epoll that shape this module:

* epoll registers *open file descriptions*, keyed by fd number. Closing an fd
  removes its registration only when no other fd refers to the same open
  file (``dup``, ``fork``). So after a user closes an fd while it is still
  registered, ``epoll_ctl(MOD)`` may fail with ENOENT (the kernel dropped it)
  and a new fd with the same number may fail ``ADD`` with EEXIST (the kernel
  kept it). Both are handled by falling back to the other operation.
* ``EPOLL_CTL_DEL`` on an fd that is already closed fails with EBADF, and on
  one the kernel already dropped with ENOENT. Either way the registration is
  gone, which is what we wanted.
* We use level-triggered mode, like asyncio's selectors: a reader that does
  not drain its fd is called again, and nothing is lost if a callback reads
  less than everything.
* EPOLLERR and EPOLLHUP are reported whatever the mask. As ``selectors`` does,
  we wake both the reader and the writer on them, so each side sees the error
  from its own read or write call.

The loop stores a ``Handle`` per direction per fd. Removing a callback
cancels its handle, so a handle already moved to the ready queue by this
iteration's poll does not run after another callback removed it.
"""

from __future__ import annotations

import errno
import select
from collections import deque
from collections.abc import Callable
from typing import Final

from corun.runtime.engine.handles import Handle

EPOLLIN: Final = select.EPOLLIN
EPOLLOUT: Final = select.EPOLLOUT
_READ_EVENTS: Final = select.EPOLLIN | select.EPOLLPRI | select.EPOLLERR | select.EPOLLHUP
_WRITE_EVENTS: Final = select.EPOLLOUT | select.EPOLLERR | select.EPOLLHUP
#: The longest single wait; the loop re-computes its timeout after it.
MAXIMUM_WAIT: Final = 24 * 3600.0
#: Most events taken from one epoll_wait; the rest wait for the next iteration.
MAX_EVENTS: Final = 1024


class FdRegistration:
    """The callbacks registered for one fd, and the events asked of epoll."""

    __slots__ = ("events", "fileobj", "reader", "writer")

    def __init__(self) -> None:
        # Invariant: events == (EPOLLIN if reader else 0) | (EPOLLOUT if writer else 0),
        # and the fd is registered with epoll with exactly these events.
        self.reader: Handle | None = None
        self.writer: Handle | None = None
        self.events: int = 0
        # What loop.add_reader()/add_writer() was given for the fd (a socket,
        # a file, or the number), so that the object finds its fd again after
        # it was closed; see EpollIO.find().
        self.fileobj: object = None


class EpollIO:
    """Registers readers and writers and waits for their fds to become ready."""

    __slots__ = ("_epoll", "_poll", "_registrations", "arrival_fd", "arrived")

    def __init__(self) -> None:
        self._epoll: select.epoll = select.epoll()
        # Bound once: a method call on a C object is a lookup by name each time.
        self._poll: Callable[[float, int], list[tuple[int, int]]] = self._epoll.poll
        self._registrations: dict[int, FdRegistration] = {}
        #: An fd watched for corun.observe, with no handle: its readiness sets
        #: ``arrived`` (see ``watch_arrivals``).
        self.arrival_fd: int = -1
        self.arrived: bool = False

    def close(self) -> None:
        """Close epoll; registered handles are cancelled."""
        for registration in self._registrations.values():
            if registration.reader is not None:
                registration.reader.cancel()
            if registration.writer is not None:
                registration.writer.cancel()
        self._registrations.clear()
        self._epoll.close()

    def __len__(self) -> int:
        return len(self._registrations)

    def watch_arrivals(self, fd: int) -> None:
        """Set ``arrived`` when ``fd`` is readable (-1: stop); no handle runs.

        For corun.observe's inspection socket, owned and read by another
        thread: the loop learns from its own polls that a client came (see
        ``LoopAccounting.client_arrived``). Level-triggered, until that thread
        accepts the client. Callable from any thread.
        """
        old = self.arrival_fd
        if old == fd:
            return
        self.arrival_fd = -1
        if old >= 0 and old not in self._registrations:
            try:
                self._epoll.unregister(old)
            except (OSError, ValueError):
                pass  # closed meanwhile: the kernel dropped it
        if fd >= 0:
            if fd in self._registrations:
                raise ValueError(f"fd {fd} is registered for a reader or writer")
            self._epoll.register(fd, EPOLLIN)
            self.arrival_fd = fd

    def get_reader(self, fd: int) -> Handle | None:
        """The reader registered for ``fd``, if any."""
        registration = self._registrations.get(fd)
        return None if registration is None else registration.reader

    def get_writer(self, fd: int) -> Handle | None:
        """The writer registered for ``fd``, if any."""
        registration = self._registrations.get(fd)
        return None if registration is None else registration.writer

    def set_reader(self, fd: int, handle: Handle) -> None:
        """Call ``handle`` whenever ``fd`` is readable, replacing any previous reader."""
        registration = self._watch(fd, EPOLLIN)
        previous, registration.reader = registration.reader, handle
        if previous is not None:
            previous.cancel()

    def set_writer(self, fd: int, handle: Handle) -> None:
        """Call ``handle`` whenever ``fd`` is writable, replacing any previous writer."""
        registration = self._watch(fd, EPOLLOUT)
        previous, registration.writer = registration.writer, handle
        if previous is not None:
            previous.cancel()

    def remove_reader(self, fd: int) -> bool:
        """Stop watching ``fd`` for reading; False if no reader was registered."""
        registration = self._registrations.get(fd)
        if registration is None or registration.reader is None:
            return False
        handle, registration.reader = registration.reader, None
        self._update(fd, registration, registration.events & ~EPOLLIN)
        handle.cancel()
        return True

    def remove_writer(self, fd: int) -> bool:
        """Stop watching ``fd`` for writing; False if no writer was registered."""
        registration = self._registrations.get(fd)
        if registration is None or registration.writer is None:
            return False
        handle, registration.writer = registration.writer, None
        self._update(fd, registration, registration.events & ~EPOLLOUT)
        handle.cancel()
        return True

    def remember(self, fd: int, fileobj: object) -> None:
        """Note that ``fd`` was registered as ``fileobj`` (the fd must be registered)."""
        self._registrations[fd].fileobj = fileobj

    def find(self, fileobj: object) -> int:
        """The fd registered as ``fileobj``, or -1.

        A socket closed after it was registered answers -1 to ``fileno()``;
        programs then unregister it in a ``finally`` block, and the stdlib's
        selectors find its registration by the object, as this does.
        """
        for fd, registration in self._registrations.items():
            if registration.fileobj is fileobj:
                return fd
        return -1

    def _watch(self, fd: int, event: int) -> FdRegistration:
        """The registration of ``fd``, now watching for ``event`` too."""
        registration = self._registrations.get(fd)
        if registration is None:
            registration = FdRegistration()
            self._update(fd, registration, event)
            self._registrations[fd] = registration
        elif not registration.events & event:
            self._update(fd, registration, registration.events | event)
        else:
            self._reassert(fd, registration)
        return registration

    def _reassert(self, fd: int, registration: FdRegistration) -> None:
        """Make sure epoll still watches ``fd`` when its callback is replaced.

        If the fd was closed without being removed and its number reused, the
        kernel dropped the old registration and the new fd would otherwise go
        unwatched.
        """
        try:
            self._epoll.modify(fd, registration.events)
        except FileNotFoundError:
            self._epoll.register(fd, registration.events)

    def _update(self, fd: int, registration: FdRegistration, events: int) -> None:
        """Tell epoll that ``fd`` now wants ``events`` (0: unregister)."""
        epoll = self._epoll
        old = registration.events
        if events == old:
            return
        if events == 0:
            try:
                epoll.unregister(fd)
            except OSError as exc:
                if exc.errno not in (errno.EBADF, errno.ENOENT):
                    raise
            del self._registrations[fd]
        elif old == 0:
            try:
                epoll.register(fd, events)
            except FileExistsError:
                # A closed fd's open file lives on elsewhere and kept the
                # registration under this number.
                epoll.modify(fd, events)
        else:
            try:
                epoll.modify(fd, events)
            except FileNotFoundError:
                # The fd was closed and reopened; the kernel dropped the old one.
                epoll.register(fd, events)
        registration.events = events

    def poll(
        self,
        timeout: float | None,
        ready: deque[Handle],
        clock: Callable[[], float] | None,
        stamp: float = 0.0,
    ) -> float:
        """Wait up to ``timeout`` seconds (forever if None); queue the handles of ready fds.

        Each handle queued is stamped with ``clock()`` read when the wait
        returned, or without a ``clock`` with ``stamp`` (see Handle._queued;
        0.0: not stamped).

        Returns:
            The stamp.
        """
        if timeout is None:
            timeout = -1.0
        elif timeout > MAXIMUM_WAIT:
            timeout = MAXIMUM_WAIT
        registrations = self._registrations
        # As many events as there are fds, not epoll.poll()'s default of
        # FD_SETSIZE - 1: it allocates (and clears) a buffer that size on
        # every call, 12 KiB, which cost more than the wait itself.
        events = self._poll(timeout, min(max(len(registrations), 1), MAX_EVENTS))
        if clock is not None:
            stamp = clock()
        for fd, mask in events:
            registration = registrations.get(fd)
            if registration is None:
                if fd == self.arrival_fd:
                    self.arrived = True
                continue
            if mask & _READ_EVENTS:
                reader = registration.reader
                if reader is not None:
                    if reader._cancelled:
                        self.remove_reader(fd)
                    else:
                        reader._queued = stamp
                        ready.append(reader)
            if mask & _WRITE_EVENTS:
                writer = registration.writer
                if writer is not None:
                    if writer._cancelled:
                        self.remove_writer(fd)
                    else:
                        writer._queued = stamp
                        ready.append(writer)
        return stamp
