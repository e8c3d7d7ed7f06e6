"""Collects records per partition into v2 batches and sends them through a ToolClient:
the console producer and ``kbroker dlq replay`` share it."""

from __future__ import annotations

import time

from kbroker.tools.partitioner import Partitioner
from kbroker.wire.compression import CODEC_NAMES
from kbroker.wire.records import BatchBuilder

CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}


class RecordSender:
    def __init__(self, client, topic: str, *, batch_records: int = 500, compression: str = "none",
                 acks: int = -1, partition: int | None = None) -> None:
        self.client = client
        self.topic = topic
        self.batch_records = batch_records
        self.compression = CODEC_IDS[compression]
        self.acks = acks
        self.fixed = partition
        parts = client.partitions(topic)
        if not parts:
            raise SystemExit(f"topic {topic} has no partitions")
        self.partitioner = Partitioner(len(parts))
        self._open: dict[int, BatchBuilder] = {}
        self.sent: list[tuple[int, int]] = []   # (partition, base offset) per batch

    def send(self, key: bytes | None, value: bytes | None, headers=(), timestamp: int | None = None,
             partition: int | None = None) -> None:
        p = partition if partition is not None else self.fixed if self.fixed is not None else self.partitioner(key)
        b = self._open.get(p)
        if b is None:
            b = self._open[p] = BatchBuilder(compression=self.compression)
        b.append(key=key, value=value, headers=list(headers),
                 timestamp=timestamp if timestamp is not None else int(time.time() * 1000))
        if len(b) >= self.batch_records:
            self._flush_one(p)

    def _flush_one(self, p: int) -> None:
        b = self._open.pop(p)
        self.sent.append((p, self.client.produce(self.topic, p, bytes(b.build()), self.acks)))
        self.partitioner.next_batch()

    def flush(self) -> None:
        for p in list(self._open):
            self._flush_one(p)
