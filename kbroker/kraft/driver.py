"""RaftDriver: runs a RaftNode under asyncio (one task; deadlines become timers).

    driver = RaftDriver(node, transport, clock=SYSTEM_CLOCK.monotonic_ms)
    driver.start()
    offset = await driver.append([framed_record, ...])   # last offset, once committed (HW)
    offset, committed = driver.append_nowait([...])       # the same, without waiting
    response = await driver.handle_request(src_node_id, request_obj)   # the server side
    driver.add_listener(fn)    # fn(CommittedBatch | SnapshotLoaded), in log order, once each
    await driver.close()       # a leader resigns (EndQuorumEpoch) before stopping

``open_node_on_disk`` builds a RaftNode on a metadata log directory: the log is
``<dir>/__cluster_metadata-0`` (PartitionLog), snapshots are ``<offset>-<epoch>.checkpoint``
files in that directory, the election state is ``<dir>/quorum-state``. When to snapshot is
the state machine's call (``SnapshotPolicy``; ``RaftNode.create_snapshot``), not the driver's.

The node is only touched from the driver's task, so nothing else needs a lock. Inbound
envelopes (from the transport's receiver or ``handle_request``) are queued and the task wakes
up; it polls the node, sends what the node wants sent, answers local requests whose responses
come back, resolves appends the high watermark has passed, and hands committed batches to the
listeners. Append waits fail with NotLeaderError if leadership is lost before they commit
(the records may still commit later: the caller treats that as "unknown", as Kafka does).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any, Callable

import os
import random

from kbroker.clock import SYSTEM_CLOCK
from kbroker.kraft.quorum_store import FileQuorumStore
from kbroker.kraft.raft import LEADER, NotLeaderError, RaftConfig, RaftNode
from kbroker.kraft.raft_log import METADATA_PARTITION_DIR, DiskRaftLog
from kbroker.kraft.snapshots import DirSnapshotStore
from kbroker.kraft.transport import Envelope, Transport

log = logging.getLogger("kbroker.kraft.driver")

Listener = Callable[[Any], None]
_LOCAL_CORR_BASE = 1 << 40           # corr ids of handle_request: never clash with the node's


class RaftDriver:
    def __init__(self, node: RaftNode, transport: Transport,
                 clock: Callable[[], int] = SYSTEM_CLOCK.monotonic_ms) -> None:
        self.node = node
        self.transport = transport
        self.clock = clock
        self._inbox: list[Envelope] = []
        self._wake = asyncio.Event()
        self._local: dict[tuple[int, int], asyncio.Future] = {}
        self._corrs = itertools.count(_LOCAL_CORR_BASE)
        self._appends: list[tuple[int, int, asyncio.Future]] = []   # (last offset, epoch, fut)
        self._listeners: list[Listener] = []
        self._task: asyncio.Task | None = None
        self._closing = False
        self._polled = asyncio.Event()      # set after each poll of the node
        transport.set_receiver(self._receive)
        node.log.on_flushed = self._wake.set   # a flush done off the loop: poll again (the HW may move)

    # -- public --------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"raft-{self.node.node_id}")

    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    async def append(self, records: list[bytes]) -> int:
        """Append as leader; returns the last offset once the high watermark passes it."""
        return await self.append_nowait(records)[1]

    def append_nowait(self, records: list[bytes]) -> tuple[int, asyncio.Future]:
        """Append as leader now (NotLeaderError if not); returns the last offset and a future
        that resolves once the high watermark passes it, so callers can pipeline appends."""
        self._refuse_if_closed()
        offset = self.node.append(records, self.clock())
        fut = asyncio.get_running_loop().create_future()
        self._appends.append((offset, self.node.epoch, fut))
        self._wake.set()
        return offset, fut

    async def handle_request(self, src: int, request) -> Any:
        """A Raft request that arrived from ``src`` over the network (or an admin request:
        DescribeQuorum, AddRaftVoter, RemoveRaftVoter); returns the node's response."""
        self._refuse_if_closed()
        corr = next(self._corrs)
        fut = asyncio.get_running_loop().create_future()
        self._local[(src, corr)] = fut
        self._inbox.append(Envelope(src, self.node.node_id, corr, request))
        self._wake.set()
        try:
            return await fut
        finally:
            self._local.pop((src, corr), None)

    async def close(self, resign_grace_ms: int = 200) -> None:
        """A leader hands over (EndQuorumEpoch) and has a moment to send it; then stop."""
        if self._task is None:
            return
        if self.node.role == LEADER:
            self.node.resign(self.clock())
            self._polled.clear()
            self._wake.set()
            try:                                # until the next poll sent EndQuorumEpoch
                await asyncio.wait_for(self._polled.wait(), resign_grace_ms / 1000)
            except asyncio.TimeoutError:
                pass
        self._closing = True
        self._wake.set()
        task, self._task = self._task, None
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        self._fail_waiters(NotLeaderError("raft driver closed"))

    def _refuse_if_closed(self) -> None:
        # after close nothing polls the node: a waiter added now would never be answered (a
        # peer's Vote or Fetch arriving during shutdown held the connection drain for 30 s)
        if self._closing:
            raise NotLeaderError("raft driver closed")

    # -- the task ------------------------------------------------------------------------------

    def _receive(self, env: Envelope) -> None:
        self._inbox.append(env)
        self._wake.set()

    async def _run(self) -> None:
        while not self._closing:
            inbound, self._inbox = self._inbox, []
            self._wake.clear()
            now = self.clock()
            try:
                out, deadline = self.node.poll(now, inbound)
            except Exception:
                log.exception("raft node %d failed to poll", self.node.node_id)
                raise
            for env in out:
                fut = self._local.get((env.dst, env.corr))
                if fut is not None:
                    if not fut.done():
                        fut.set_result(env.msg)
                else:
                    self.transport.send(env)
            self._polled.set()
            self._deliver()
            if self._inbox:
                continue
            wait = max(0, deadline - self.clock())
            # asyncio.wait, not wait_for: 3.11's wait_for can swallow a cancel that races
            # with the event being set, and whoever cancels this task would wait forever.
            waiter = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait([waiter], timeout=min(wait, 60_000) / 1000)
            finally:
                waiter.cancel()

    def _deliver(self) -> None:
        node = self.node
        for item in node.take_committed():
            for fn in self._listeners:
                try:
                    fn(item)
                except Exception:
                    log.exception("raft listener failed")
        hw = node.high_watermark
        keep = []
        for offset, epoch, fut in self._appends:
            if fut.done():
                continue
            if offset < hw and (node.log.epoch_for_offset(offset) == epoch or
                                (offset < node.log.start_offset and node.epoch == epoch)):
                fut.set_result(offset)       # committed (a snapshot may already cover it)
            elif node.epoch != epoch or node.role != LEADER:
                fut.set_exception(NotLeaderError(
                    f"leadership moved before offset {offset} committed (now epoch {node.epoch})"))
            else:
                keep.append((offset, epoch, fut))
        self._appends = keep

    def _fail_waiters(self, exc: Exception) -> None:
        for _o, _e, fut in self._appends:
            if not fut.done():
                fut.set_exception(exc)
        self._appends = []
        for fut in self._local.values():
            if not fut.done():
                fut.set_exception(exc)


def open_node_on_disk(metadata_dir: str, node_id: int, config: RaftConfig, *,
                      voters=None, cluster_id: str = "", now_ms: int = 0,
                      rng: random.Random | None = None) -> RaftNode:
    """A RaftNode on ``metadata_dir``. ``voters``: the static ``controller.quorum.voters``
    ids (kraft.version 0), or None when the voter set comes from the bootstrap checkpoint
    that ``format --standalone`` / ``--initial-controllers`` wrote (KIP-853)."""
    part_dir = os.path.join(metadata_dir, METADATA_PARTITION_DIR)
    snaps = DirSnapshotStore(part_dir)
    log_ = DiskRaftLog.open(metadata_dir, now_ms)
    store = FileQuorumStore(metadata_dir, cluster_id, kraft_version=0 if voters is not None else 1)
    config.cluster_id = config.cluster_id or cluster_id or None
    return RaftNode(node_id, log_, store, snaps, config, rng or random.Random(), voters=voters,
                    now_ms=now_ms)
