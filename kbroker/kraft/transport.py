"""How Raft messages travel between nodes: the Envelope, the Transport protocol, and an
in-memory network with seeded faults for tests and simulations.

An ``Envelope`` carries one generated Kafka request or response object (``VoteRequest``,
``FetchResponse`` ...). A response carries the ``corr`` of the request it answers, and goes
back to the request's ``src``. Correlation ids are chosen by the sender and only mean
something to it.

``Transport`` is what the Raft driver talks to: ``send(env)`` and a receiver callback for
inbound envelopes. ``MemoryNetwork`` is the shared medium of the in-memory transport: each node
gets an endpoint (``network.endpoint(node_id)``); the network holds every message in flight
with a delivery time drawn from a seeded rng, and may drop, duplicate or reorder them, or cut
links. It never reads a clock: whoever drives it (the simulation's event loop, or
``run_memory_network`` under asyncio) passes ``now_ms`` and asks for what is due.
"""

from __future__ import annotations

import asyncio
import heapq
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from kbroker.clock import SYSTEM_CLOCK


@dataclass(frozen=True, slots=True)
class Envelope:
    src: int
    dst: int
    corr: int
    msg: Any

    @property
    def is_response(self) -> bool:
        return type(self.msg).__name__.endswith("Response")


Receiver = Callable[[Envelope], None]


class Transport(Protocol):
    def send(self, env: Envelope) -> None:
        """Queue ``env`` for ``env.dst``; never blocks, never raises for an unreachable peer
        (a lost message is what Raft's timeouts are for)."""

    def set_receiver(self, receiver: Receiver) -> None:
        """Inbound envelopes addressed to this node are passed to ``receiver``."""


@dataclass
class Faults:
    """What the in-memory network does to each message (probabilities in [0, 1])."""
    min_delay_ms: int = 1
    max_delay_ms: int = 5
    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0           # chance of an extra delay up to reorder_extra_ms
    reorder_extra_ms: int = 50


@dataclass(order=True)
class _InFlight:
    due_ms: int
    seq: int
    env: Envelope = field(compare=False)


class MemoryNetwork:
    """All messages in flight between in-memory endpoints, with seeded faults."""

    def __init__(self, rng: random.Random, faults: Faults | None = None,
                 clock: Callable[[], int] | None = None) -> None:
        self.rng = rng
        self.faults = faults or Faults()
        self.clock = clock                      # now_ms source for endpoint sends
        self._queue: list[_InFlight] = []
        self._seq = 0
        self._cut: set[tuple[int, int]] = set()  # directed links that lose everything
        self._down: set[int] = set()             # nodes that neither send nor receive
        self._receivers: dict[int, Receiver] = {}
        self.sent = self.dropped = self.duplicated = 0

    # -- topology ----------------------------------------------------------------------------

    def endpoint(self, node_id: int) -> "MemoryTransport":
        return MemoryTransport(self, node_id)

    def cut(self, a: int, b: int, both: bool = True) -> None:
        self._cut.add((a, b))
        if both:
            self._cut.add((b, a))

    def heal(self, a: int, b: int) -> None:
        self._cut.discard((a, b))
        self._cut.discard((b, a))

    def isolate(self, node: int, others) -> None:
        for o in others:
            if o != node:
                self.cut(node, o)

    def partition(self, groups: list[list[int]]) -> None:
        """Only nodes in the same group can talk."""
        for i, g in enumerate(groups):
            for h in groups[i + 1:]:
                for a in g:
                    for b in h:
                        self.cut(a, b)

    def heal_all(self) -> None:
        self._cut.clear()

    def set_down(self, node: int, down: bool) -> None:
        """A crashed node: messages to it are lost, including those already in flight."""
        if down:
            self._down.add(node)
        else:
            self._down.discard(node)

    def linked(self, a: int, b: int) -> bool:
        return (a, b) not in self._cut and a not in self._down and b not in self._down

    # -- traffic -----------------------------------------------------------------------------

    def send(self, env: Envelope, now_ms: int) -> None:
        self.sent += 1
        f = self.faults
        if not self.linked(env.src, env.dst) or (f.drop and self.rng.random() < f.drop):
            self.dropped += 1
            return
        copies = 2 if f.duplicate and self.rng.random() < f.duplicate else 1
        self.duplicated += copies - 1
        for _ in range(copies):
            delay = self.rng.randint(f.min_delay_ms, f.max_delay_ms)
            if f.reorder and self.rng.random() < f.reorder:
                delay += self.rng.randint(0, f.reorder_extra_ms)
            self._seq += 1
            heapq.heappush(self._queue, _InFlight(now_ms + delay, self._seq, env))

    def next_due_ms(self) -> int | None:
        return self._queue[0].due_ms if self._queue else None

    def pop_due(self, now_ms: int) -> list[Envelope]:
        """Messages whose delivery time has come, in delivery order; those whose link was
        cut (or whose end went down) while in flight are lost."""
        out = []
        q = self._queue
        while q and q[0].due_ms <= now_ms:
            env = heapq.heappop(q).env
            if self.linked(env.src, env.dst):
                out.append(env)
            else:
                self.dropped += 1
        return out

    def deliver_due(self, now_ms: int) -> int:
        """Hand due messages to the endpoints' receivers; returns how many."""
        n = 0
        for env in self.pop_due(now_ms):
            r = self._receivers.get(env.dst)
            if r is not None:
                r(env)
                n += 1
        return n


class MemoryTransport:
    """One node's endpoint on a MemoryNetwork (implements ``Transport``)."""

    def __init__(self, network: MemoryNetwork, node_id: int) -> None:
        self.network = network
        self.node_id = node_id

    def send(self, env: Envelope) -> None:
        clock = self.network.clock
        self.network.send(env, clock() if clock else 0)

    def set_receiver(self, receiver: Receiver) -> None:
        self.network._receivers[self.node_id] = receiver


async def run_memory_network(network: MemoryNetwork, clock: Callable[[], int] = SYSTEM_CLOCK.monotonic_ms,
                             tick_ms: int = 1) -> None:
    """Deliver a MemoryNetwork's messages under asyncio in real time (tests of the driver)."""
    if network.clock is None:
        network.clock = clock
    while True:
        network.deliver_due(clock())
        due = network.next_due_ms()
        wait = tick_ms if due is None else max(0, min(due - clock(), 20))
        await asyncio.sleep(max(wait, tick_ms) / 1000)
