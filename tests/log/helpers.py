"""Batch builders shared by the log tests."""

from __future__ import annotations

from kbroker.wire.records import BatchBuilder


def make_batch(n: int = 1, *, ts: int = 1000, key_prefix: bytes | None = b"k",
               value: bytes = b"v" * 20, producer_id: int = -1, producer_epoch: int = -1,
               base_sequence: int = -1, compression: int = 0, keys=None, values=None,
               timestamps=None) -> bytearray:
    b = BatchBuilder(compression=compression, producer_id=producer_id,
                     producer_epoch=producer_epoch, base_sequence=base_sequence)
    for i in range(n):
        k = keys[i] if keys is not None else (None if key_prefix is None else key_prefix + str(i).encode())
        v = values[i] if values is not None else value
        t = timestamps[i] if timestamps is not None else ts + i
        b.append(key=k, value=v, timestamp=t)
    return bytearray(b.build())


def concat(*batches) -> bytearray:
    out = bytearray()
    for b in batches:
        out += b
    return out
