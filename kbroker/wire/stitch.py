"""Encoding a large message in slices (kbroker.slices): the message is encoded once with one
array field empty, and the elements are written between the two halves, a few per step. The
result is byte for byte what ``encode_into`` writes in one go.

Used for the responses whose size grows with the partition count (all-topics Metadata, full
Fetch)."""

from __future__ import annotations

from kbroker.wire.primitives import I32, Writer, wr_uvarint


def halves(msg, field: str, version: int, flexible: bool, *, head_len: int | None = None,
           tail_len: int | None = None, encode=None) -> tuple[bytes, bytes]:
    """(what comes before the elements of ``msg``'s array ``field``, what comes after them)
    at ``version``: the message encoded with the array empty, cut around the empty array's
    count. Where the array sits is given by the bytes before it (``head_len``) or after it
    (``tail_len``). ``encode(msg, writer, version)``: the encoder to use (default: the
    message's own ``encode_into``)."""
    items = getattr(msg, field)
    setattr(msg, field, [])
    try:
        w = Writer()
        (encode or type(msg).encode_into)(msg, w, version)
    finally:
        setattr(msg, field, items)
    empty = bytes(w)
    count = 1 if flexible else 4      # an empty array's count: uvarint 1, or int32 0
    if head_len is None:
        head_len = len(empty) - tail_len - count
    return empty[:head_len], empty[head_len + count:]


def write_count(w, n: int, flexible: bool) -> None:
    """An array's element count (compact arrays in flexible versions)."""
    if flexible:
        wr_uvarint(w, n + 1)
    else:
        w += I32.pack(n)
