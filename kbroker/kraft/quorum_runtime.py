"""The controller on Raft (Kafka's QuorumController over KafkaRaftClient).

Every node runs a RaftNode for ``__cluster_metadata`` (voter or observer) under a RaftDriver.
Committed batches (and snapshots) arrive through the driver's listener, in log order, and are
applied here twice: to the controller's image (``Controller.replay``: a standby controller is
always ready to take over) and, through the ``MetadataLoader``, to the broker's image and its
publishers. Nothing uncommitted reaches either image.

The node is the *active* controller when its Raft node leads and it has applied everything
up to the start of its epoch (the previous leaders' records, committed together with the
epoch's LeaderChange record): only then is its controller image the whole truth.
``submit(op)`` runs operations one at a time but pipelines their commits, as Kafka's
controller does: an operation reads the controller image, its records are appended as leader
and applied to the controller image at once (so the next operation sees them), and its
response is released once they are committed and applied to the broker's image. Many
operations in flight share one replication round trip. A node that is not active, or loses
leadership before the commit, raises NotControllerError; the request is answered
NOT_CONTROLLER and the broker's channel retries with the new leader (the records may still
commit: the caller treats that as unknown, as Kafka does). A leader that loses leadership
with records applied but not committed rebuilds its controller image from the committed one
(Kafka reverts to its last committed snapshot).

On becoming active the node gives every broker a fresh session (``on_activate``) and, on a
new cluster, writes the bootstrap records (metadata.version). Snapshots: after
``metadata.log.max.record.bytes.between.snapshots`` of committed records (or
``metadata.log.max.snapshot.interval.ms``) the node writes the controller image as a
snapshot (``image_records``) and the log below it is cleaned.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any, Callable, Generator

from kbroker.kraft.controller import Controller, ControllerResult
from kbroker.kraft.controller_apis import NotControllerError
from kbroker.kraft.image import MetadataImage
from kbroker.kraft.image_snapshot import image_of, image_records   # one definition: snapshots keep security records too
from kbroker.kraft.loader import MetadataLoader
from kbroker.kraft.raft import LEADER, CommittedBatch, NotLeaderError, SnapshotLoaded
from kbroker.kraft.records import decode_record, encode_record
from kbroker.kraft.snapshots import SnapshotPolicy
from kbroker.slices import LEFT, run_for, run_in_slices

INLINE_RECORDS = 64        # operations up to this many records are encoded at once
# metadata work holds the loop about this long at a time (4 ms: with the steps that run
# whole, such as applying a 1,000-partition batch to the image, iterations reached 5-8 ms)
APPLY_SLICE_S = 0.002
INLINE_SLICE_S = 0.001     # in the driver's own step (it already polled, flushed, read the batch)


def _encode_steps(records: list) -> Generator[None, None, list[bytes]]:
    out = []
    for r in records:
        out.append(encode_record(r))
        yield
    return out

log = logging.getLogger("kbroker.kraft")


class RaftControllerRuntime:
    def __init__(self, controller: Controller | None, image: MetadataImage, driver, *,
                 now_ms: Callable[[], int], snapshot_policy: SnapshotPolicy | None = None) -> None:
        self.controller = controller      # None on a broker-only node (an observer)
        self.image = image
        self.driver = driver
        self.node = driver.node
        self.now_ms = now_ms
        self.loader = MetadataLoader(image)
        self.publishers = self.loader.publishers
        self.applied = 0                  # next offset to apply (the images are at it)
        self.published = 0                # next offset whose publication is not done
        self._queue: collections.deque = collections.deque()   # _apply_steps of committed items, in order
        self._worker: asyncio.Task | None = None
        self.on_activate: list[Callable[[int], Any]] = []
        self.snapshot_policy = snapshot_policy or SnapshotPolicy()
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = now_ms()
        self._lock = asyncio.Lock()
        self._was_active = False
        self._applied_waiters: list[tuple[int, asyncio.Future]] = []
        # Records this node appended as leader and already applied to the controller image:
        # offsets below _speculative_end, written in epoch _speculative_epoch.
        self._speculative_end = 0
        self._speculative_epoch = -1
        driver.add_listener(self._on_committed)

    # -- state -------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        node = self.node
        return (self.controller is not None and node.role == LEADER
                and self.applied > node.epoch_start_offset)

    @property
    def leader_id(self) -> int:
        return self.node.leader_id

    def caught_up(self) -> bool:
        """Leader known and everything committed so far applied and published."""
        return self.node.leader_id >= 0 and self.published >= self.node.high_watermark

    # -- committed records in ----------------------------------------------------------------

    def _on_committed(self, item) -> None:
        """The driver's listener. A batch is applied here if that takes under 1 ms; the rest
        of a large one (a 1,000-partition topic: ~50 ms of decoding, applying and publishing)
        goes on in a task, in slices, and every batch after it queues behind it (log order)."""
        steps = self._apply_steps(item)
        if not self._queue and run_for(steps, INLINE_SLICE_S) is not LEFT:
            return
        self._queue.append(steps)
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._apply_queued(),
                                                                  name="metadata-apply")

    async def _apply_queued(self) -> None:
        try:
            while self._queue:
                try:
                    await run_in_slices(self._queue[0], APPLY_SLICE_S)
                except Exception:      # as the driver does for a listener that fails
                    log.exception("applying committed metadata failed")
                self._queue.popleft()
        finally:
            self._worker = None

    def _apply_steps(self, item) -> Generator[None, None, None]:
        """Decode (pausing), then apply to the controller's and the broker's images in one
        step with ``applied`` (nothing reads a half-applied batch), then publish (pausing);
        operations waiting for these offsets are answered once the publication is done."""
        self._drop_speculation_if_deposed()
        if isinstance(item, SnapshotLoaded):
            recs = [decode_record(v) for v in item.records]
            end = item.snapshot_id.end_offset
            if self.controller is not None:
                self._reset_controller_image(recs, end)
            self.loader.load_snapshot(recs, end)
            self.applied = end
            log.info("loaded metadata snapshot at offset %d (%d records)", end, len(recs))
        elif isinstance(item, CommittedBatch):
            changes = None
            if not item.is_control and item.records:
                recs = []
                for v in item.records:
                    recs.append(decode_record(v))
                    yield
                if self.controller is not None:
                    for i, r in enumerate(recs):
                        if item.base_offset + i >= self._speculative_end:   # else applied at append
                            self.controller.replay(r, item.base_offset + i)
                changes = self.loader.apply(item.base_offset, recs)
                self._bytes_since_snapshot += sum(len(v) for v in item.records)
            self.applied = item.last_offset + 1
            if self.controller is not None:
                self.controller.next_offset = max(self.controller.next_offset, self.applied)
            if changes is not None:       # (empty: a batch applied before; waiters still wake)
                yield from self.loader.publish_steps(changes)
        self.published = self.applied
        self._wake_applied()
        self._check_activation()

    def _reset_controller_image(self, records: list, end: int) -> None:
        self.controller.image = image_of(records, end - 1)
        self.controller.next_offset = end

    def _drop_speculation_if_deposed(self) -> None:
        """A leader that lost its epoch may hold applied records the new leader truncates:
        rebuild the controller image from the broker's, which holds only committed records."""
        if self._speculative_end == 0:
            return
        node = self.node
        if node.role == LEADER and node.epoch == self._speculative_epoch:
            return
        if self._speculative_end > self.applied:
            log.info("node %d lost leadership with metadata up to offset %d uncommitted: reverting to %d",
                     node.node_id, self._speculative_end - 1, self.applied - 1)
            self._reset_controller_image(image_records(self.image), self.applied)
        self._speculative_end = 0

    def _wake_applied(self) -> None:
        keep = []
        for off, fut in self._applied_waiters:
            if fut.done():
                continue
            if self.published > off:
                fut.set_result(None)
            else:
                keep.append((off, fut))
        self._applied_waiters = keep

    def _check_activation(self) -> None:
        self._drop_speculation_if_deposed()
        now_active = self.active
        if now_active and not self._was_active:
            log.info("node %d is the active controller (epoch %d)", self.node.node_id, self.node.epoch)
            for fn in self.on_activate:
                try:
                    fn(self.now_ms())
                except Exception:
                    log.exception("on_activate hook failed")
        self._was_active = now_active

    async def watch(self) -> None:
        """Notice leadership changes that come without a committed batch (losing it), and
        take snapshots when due."""
        while True:
            await asyncio.sleep(0.05)
            self._check_activation()
            try:
                self.maybe_snapshot()
            except Exception:
                log.exception("metadata snapshot failed")

    async def wait_caught_up(self, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while not self.caught_up():
            if loop.time() >= end:
                return False
            await asyncio.sleep(0.02)
        return True

    # -- operations --------------------------------------------------------------------------

    async def submit(self, op: Callable[[Controller, int], ControllerResult]) -> Any:
        async with self._lock:
            self._drop_speculation_if_deposed()
            if not self.active:
                raise NotControllerError(f"node {self.node.node_id} is not the active controller "
                                         f"(leader {self.node.leader_id})")
            c = self.controller
            c.next_offset = self.node.log_end_offset
            result = op(c, self.now_ms())
            if not result.records:
                return result.response
            epoch = self.node.epoch
            if len(result.records) <= INLINE_RECORDS:
                values = [encode_record(r) for r in result.records]
            else:      # a 1,000-partition topic: ~10 ms of encoding, in slices
                values = await run_in_slices(_encode_steps(result.records), APPLY_SLICE_S)
                if self.node.epoch != epoch or not self.active:
                    raise NotControllerError(f"node {self.node.node_id} lost leadership while encoding")
            try:
                last, committed = self.driver.append_nowait(values)
            except NotLeaderError as e:
                raise NotControllerError(str(e)) from None
            first = last - len(result.records) + 1
            for i, r in enumerate(result.records):
                c.replay(r, first + i)
            self._speculative_end, self._speculative_epoch = last + 1, self.node.epoch
        try:
            await committed
        except NotLeaderError as e:
            raise NotControllerError(str(e)) from None
        if self.published <= last:
            fut = asyncio.get_running_loop().create_future()
            self._applied_waiters.append((last, fut))
            await fut
        return result.response

    def submit_now(self, op):
        raise RuntimeError("a Raft quorum commits asynchronously: use submit()")

    # -- snapshots ---------------------------------------------------------------------------

    def maybe_snapshot(self, force: bool = False) -> int | None:
        """Write a snapshot of the applied state when the policy says so; its end offset."""
        now = self.now_ms()
        if not force and not self.snapshot_policy.due(self._bytes_since_snapshot, self._last_snapshot_ms, now):
            return None
        end = self.applied
        if self._queue:
            return None     # a batch is half-published: wait until the images are settled
        if end <= self.node.log.start_offset or end > self.node.high_watermark:
            return None
        # the broker's image: the controller's may hold records not yet committed
        image = self.image
        framed = [encode_record(r) for r in image_records(image)]
        sid = self.node.create_snapshot(end, framed, now)
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = now
        log.info("metadata snapshot %s (%d records); log cleaned below it", sid.file_name(), len(framed))
        return end

    def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
