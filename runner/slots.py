"""At most N pods run at once on this machine, gangs admitted whole.

Argo starts every ready pod up to the workflow's ``parallelism`` (100 in compiled flows) and
leaves the rest to the cluster's capacity; here the cluster is one machine, so a wide
foreach would start every child at once. Metaflow's local runtime caps its running tasks
(``run --max-workers``, 16 by default); the runner caps running pods the same way, with a
default from this machine's cores (:func:`default_max_workers`). Argo's own
``parallelism`` limits still apply on top (the scheduler's ``pod_slot``).

A JobSet's pods are admitted together (all of them take slots at once, or none: a gang
half started would wait for the other half while holding the machine), and a gang larger
than N waits for every slot and then runs alone. Waiters are served in order, so single
pods arriving after a gang do not starve it.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from typing import AsyncIterator

METAFLOW_MAX_WORKERS = 16  # metaflow run --max-workers' default


def machine_cores() -> int:
    """The cores this process may run on (its affinity mask, as a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_max_workers() -> int:
    """Two pods per core (a Metaflow task waits on its datastore part of the time), at most
    Metaflow's own default."""
    return min(2 * machine_cores(), METAFLOW_MAX_WORKERS)


class PodSlots:
    """``capacity`` slots; :meth:`admit` takes ``n`` of them (at most all) until it exits."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"max workers must be at least 1, got {capacity}")
        self.capacity = capacity
        self.free = capacity
        self.peak = 0  # most slots in use at once (for tests and benchmarks)
        self._waiters: deque[tuple[int, asyncio.Future]] = deque()

    def weight(self, n: int) -> int:
        """Slots ``n`` pods take: a gang larger than the machine takes all of them."""
        return max(1, min(n, self.capacity))

    @contextlib.asynccontextmanager
    async def admit(self, n: int = 1) -> AsyncIterator[None]:
        w = self.weight(n)
        if self._waiters or self.free < w:
            fut = asyncio.get_running_loop().create_future()
            entry = (w, fut)
            self._waiters.append(entry)
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self._release(w)  # granted as we were cancelled: give it back
                else:
                    self._waiters.remove(entry)
                    self._wake()  # the next waiter may fit now
                raise
        else:
            self.free -= w
        self.peak = max(self.peak, self.capacity - self.free)
        try:
            yield
        finally:
            self._release(w)

    def _release(self, w: int) -> None:
        self.free += w
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.free >= self._waiters[0][0]:
            w, fut = self._waiters.popleft()
            if fut.done():
                continue
            self.free -= w
            fut.set_result(None)
