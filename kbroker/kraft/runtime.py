"""The controller runtime: metadata log, commit, replay, publish.

``MetadataLog`` stores metadata records in ``<metadata.log.dir>/__cluster_metadata-0`` with
``kbroker.log.PartitionLog``, as Kafka does: one RecordBatch per controller operation (so an
operation's records commit atomically), partition leader epoch = the Raft epoch, each record
with a null key and the framed metadata record as value (``kbroker.kraft.records``).

``ControllerRuntime.submit(op)`` runs ``op(controller, now_ms) -> ControllerResult``, appends
the result's records, waits for them to commit, replays them into the controller's image and
the broker's image, tells the publishers, and returns the result's response. With a single
voter (this version) the commit is the local append + fsync; a Raft quorum replaces
``_commit`` with "append as leader, await the high watermark" and nothing else changes.
``quorum-state`` (Kafka's file name and JSON shape) keeps the epoch across restarts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any, Callable, Iterable, Iterator

from kbroker.kraft.controller import Controller, ControllerResult
from kbroker.kraft.image import MetadataImage
from kbroker.kraft.records import decode_record, encode_record
from kbroker.wire.records import BatchBuilder, iter_batches

log = logging.getLogger("kbroker.kraft")

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION_DIR = METADATA_TOPIC + "-0"
QUORUM_STATE_FILE = "quorum-state"

Publisher = Callable[[Any, Any, int], None]   # (record, change, offset)


class MetadataLog:
    def __init__(self, plog) -> None:
        self.plog = plog

    @property
    def end_offset(self) -> int:
        return self.plog.log_end_offset

    def append(self, records: list, epoch: int, now_ms: int) -> int:
        """Append one batch; returns the offset of its first record."""
        b = BatchBuilder(partition_leader_epoch=epoch)
        for rec in records:
            b.append(key=None, value=encode_record(rec), timestamp=now_ms)
        info = self.plog.append(bytearray(b.build()), now_ms)
        self.plog.flush()
        self.plog.high_watermark = self.plog.log_end_offset
        return info.first_offset

    def read_all(self, chunk: int = 8 * 1024 * 1024) -> Iterator[tuple[int, Any]]:
        """Every (offset, record) from the log start, in order; control batches skipped."""
        offset = self.plog.log_start_offset
        end = self.plog.log_end_offset
        while offset < end:
            data = self.plog.read(offset, chunk).to_bytes()
            if not data:
                break
            for batch in iter_batches(data):
                if batch.next_offset <= offset:
                    continue
                if not batch.is_control:
                    for rec in batch.records():
                        if rec.offset >= offset:
                            yield rec.offset, decode_record(rec.value)
                offset = batch.next_offset


class QuorumState:
    """Kafka's ``quorum-state`` file: the current epoch and leader (a single voter here)."""

    def __init__(self, path: str, node_id: int) -> None:
        self.path = path
        self.node_id = node_id
        self.epoch = 0
        self.leader_id = -1
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            self.epoch = int(data.get("leaderEpoch", 0))
        except FileNotFoundError:
            pass

    def become_leader(self) -> int:
        """The single voter elects itself: a new epoch, persisted before any write in it."""
        self.epoch += 1
        self.leader_id = self.node_id
        data = {"clusterId": "", "leaderId": self.node_id, "leaderEpoch": self.epoch,
                "votedId": self.node_id, "appliedOffset": 0,
                "currentVoters": [{"voterId": self.node_id}], "data_version": 0}
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        return self.epoch


class ControllerRuntime:
    def __init__(self, controller: Controller, image: MetadataImage, mlog: MetadataLog,
                 quorum: QuorumState, now_ms: Callable[[], int]) -> None:
        self.controller = controller
        self.image = image             # the broker's image: committed records only
        self.mlog = mlog
        self.quorum = quorum
        self.now_ms = now_ms
        from kbroker.kraft.loader import MetadataLoader
        self.loader = MetadataLoader(image)   # the broker's image is fed by committed records only
        self.publishers = self.loader.publishers
        self.active = True                    # a single voter is always the active controller
        self._lock = asyncio.Lock()

    # -- start-up ----------------------------------------------------------------------------

    def replay(self) -> int:
        """Rebuild both images from the metadata log; returns the number of records."""
        n = 0
        for offset, rec in self.mlog.read_all():
            self.controller.replay(rec, offset)
            self.image.apply(rec, offset)
            n += 1
        self.controller.next_offset = self.mlog.end_offset
        return n

    def elect(self) -> int:
        epoch = self.quorum.become_leader()
        log.info("node %d is the metadata quorum leader, epoch %d (single voter)", self.quorum.node_id, epoch)
        return epoch

    # -- operations --------------------------------------------------------------------------

    async def submit(self, op: Callable[[Controller, int], ControllerResult]) -> Any:
        """Run a controller operation; its response once its records are committed."""
        async with self._lock:
            return self.submit_now(op)

    def submit_now(self, op: Callable[[Controller, int], ControllerResult]) -> Any:
        """Single voter: run, append, commit and publish without yielding to the loop."""
        result = op(self.controller, self.now_ms())
        if result.records:
            self._commit(result.records)
        return result.response

    def _commit(self, records: list) -> None:
        now = self.now_ms()
        first = self.mlog.append(records, self.quorum.epoch, now)
        for i, rec in enumerate(records):
            self.controller.replay(rec, first + i)
        self.loader.apply_batch(first, records)

    def close(self) -> None:
        """The metadata log itself is closed by the LogManager that opened it."""
