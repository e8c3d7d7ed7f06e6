"""The metadata loader (Kafka's MetadataLoader): committed metadata records -> the broker's
image -> publishers.

Only committed records reach it: batches the metadata quorum has committed (the Raft driver's
committed-batch listener, or the single-voter runtime once its append is durable) and
snapshots. ``apply_batch(first_offset, records)`` applies each record to the broker's
``MetadataImage`` and hands every publisher ``(record, change, offset)`` — the delta the
replica manager and the coordinators act on — in log order. ``load_snapshot(image_records,
end_offset)`` replaces the image by a snapshot's records (a broker that was too far behind)
and tells publishers with ``reload(image)``.

``changed(timeout)`` lets a waiter (a forwarded CreateTopics, the broker's start-up) sleep
until the image moves.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Generator

from kbroker.kraft.image import MetadataImage
from kbroker.kraft.image_snapshot import image_of
from kbroker.slices import run_to_end

log = logging.getLogger("kbroker.kraft.loader")

Publisher = Callable[[Any, Any, int], None]   # (record, change, offset)


class MetadataLoader:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.publishers: list[Publisher] = []
        self.reloaders: list[Callable[[MetadataImage], None]] = []
        self._waiters: list[asyncio.Future] = []
        self.publishing = 0     # batches applied to the image whose publication is not done

    @property
    def offset(self) -> int:
        """The offset of the last record applied (-1: none)."""
        return self.image.offset

    def apply_batch(self, first_offset: int, records: list) -> None:
        self.publish(self.apply(first_offset, records))

    def apply(self, first_offset: int, records: list) -> list[tuple[Any, Any, int]]:
        """Apply a whole committed batch to the image in one step (a reader never sees part
        of a batch, as Kafka publishes a whole new image); returns what ``publish`` hands
        the publishers: (record, change, offset) per record applied."""
        changes = []
        for i, rec in enumerate(records):
            off = first_offset + i
            if off <= self.image.offset:
                continue                          # already applied (a replayed batch)
            changes.append((rec, self.image.apply(rec, off), off))
        self.publishing += 1
        return changes

    def publish(self, changes: list) -> None:
        run_to_end(self.publish_steps(changes))

    def publish_steps(self, changes: list) -> Generator[None, None, None]:
        """Hand each applied record to every publisher, in log order, pausing after each
        (``kbroker.slices``): a 1,000-partition topic's records install their replicas in
        slices that let the loop serve clients. ``changed`` waiters wake once all are out."""
        try:
            for rec, change, off in changes:
                for pub in self.publishers:
                    more = pub(rec, change, off)
                    if more is not None:      # a publisher's own work in slices (a generator)
                        yield from more
                yield
        finally:
            self.publishing -= 1
        self._wake()

    def load_snapshot(self, records: list, end_offset: int) -> None:
        """Rebuild the image from a snapshot's records (covering offsets < end_offset)."""
        image = image_of(records, end_offset - 1)
        # the image object is shared (handlers hold the server's), so move state into it
        self.image.__dict__.update(image.__dict__)
        for fn in self.reloaders:
            fn(self.image)
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def changed(self, timeout_s: float) -> None:
        """Return when the image next changes, or after ``timeout_s``."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(fut, max(0.0, timeout_s))
        except asyncio.TimeoutError:
            pass
