"""Kafka's default partitioning: murmur2 of the key (so kbroker's tools put a keyed record
where the Java client would), keyless records spread round-robin by batch."""

from __future__ import annotations

import itertools

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), as a signed 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[i * 4:i * 4 + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    tail = data[n4 * 4:]
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class Partitioner:
    def __init__(self, num_partitions: int) -> None:
        self.n = num_partitions
        self._rr = itertools.cycle(range(num_partitions))
        self._sticky = next(self._rr)

    def __call__(self, key: bytes | None) -> int:
        return partition_for_key(key, self.n) if key is not None else self._sticky

    def next_batch(self) -> None:
        """Keyless records move to the next partition once a batch is sent (sticky partitioning)."""
        self._sticky = next(self._rr)
