"""RecordBatch.keys_and_values (the coordinator load's record reader) against records():
the same keys and values for every batch records() reads, and CorruptRecordError (never a
wrong pair) for damaged record data."""
import random

from kbroker.wire import compression as C
from kbroker.wire.records import BatchBuilder, CorruptRecordError, RecordBatch


def random_batch(rng, codec=C.NONE, with_headers=True):
    b = BatchBuilder(codec)
    offset = 0
    for _ in range(rng.randrange(0, 40)):
        size = rng.choice((0, 1, 63, 64, 200, 8191, 8192, 20000))
        key = None if rng.random() < 0.2 else rng.randbytes(rng.choice((0, 2, 63, 64, 300)))
        value = None if rng.random() < 0.2 else rng.randbytes(size)
        headers = [("h%d" % i, None if rng.random() < 0.3 else rng.randbytes(rng.randrange(100)))
                   for i in range(rng.choice((0, 0, 1, 3)) if with_headers else 0)]
        ts = rng.choice((0, 1, -1, 1 << 40, rng.randrange(-(1 << 20), 1 << 20)))
        offset += rng.choice((1, 1, 200))               # gaps, as compaction leaves them
        b.append(key=key, value=value, headers=headers, timestamp=ts, offset=offset)
    return b.build()


def pairs(batch):
    return [(r.key, r.value) for r in batch.records()]


def test_keys_and_values_are_what_records_reads():
    rng = random.Random(15)
    for i in range(300):
        batch = RecordBatch(random_batch(rng, C.NONE if i % 10 else rng.choice((C.GZIP, C.ZSTD, C.LZ4))))
        assert list(batch.keys_and_values()) == pairs(batch), f"batch {i}"


def test_damaged_record_data_raises_or_reads_what_records_reads():
    rng = random.Random(7)
    raised = 0
    for _ in range(400):
        raw = bytearray(random_batch(rng))
        if len(raw) <= 61:
            continue
        at = rng.randrange(61, len(raw))                 # inside the records, past the header
        raw[at] = rng.randrange(256)
        if rng.random() < 0.3:
            del raw[rng.randrange(61, len(raw)):]
            raw[8:12] = (len(raw) - 12).to_bytes(4, "big")   # the batch length says so too
        batch = RecordBatch(raw)
        try:
            got = list(batch.keys_and_values())
        except CorruptRecordError:
            raised += 1
            continue
        try:
            want = pairs(batch)
        except CorruptRecordError:                       # bad headers only records() reads
            continue
        assert got == want
    assert raised > 50


def read_until_error(batch):
    got = []
    try:
        for kv in batch.keys_and_values():
            got.append(kv)
    except CorruptRecordError:
        return got, True
    return got, False


def test_a_key_or_record_overrunning_its_length_is_refused_before_it_is_read():
    b = BatchBuilder()
    for key in (b"k", b"m", b"n"):
        b.append(key=key, value=b"", timestamp=0)
    good = bytes(b.build())
    # each record: length, attributes, timestamp delta, offset delta, key length, key, value length, headers
    first_key_len, last_rec_len = 61 + 4, 61 + 2 * 8
    assert good[first_key_len] == 2 and good[last_rec_len] == 14       # zigzag(1), zigzag(7)
    for at, bad in ((first_key_len, 6), (last_rec_len, 16)):           # key of 3 bytes; record of 8
        raw = bytearray(good)
        raw[at] = bad
        got, raised = read_until_error(RecordBatch(raw))
        assert raised and got == [(b"k", b""), (b"m", b"")][:len(got)]


def keyless_by_decoding(batch):
    return [i for i, r in enumerate(batch.records()) if r.key is None]


def test_keyless_records_are_what_records_reads():
    """The compacted topics' key check (only lengths read) against a full decode, with
    headers and without."""
    rng = random.Random(21)
    for i in range(300):
        codec = C.NONE if i % 10 else rng.choice((C.GZIP, C.ZSTD, C.LZ4))
        batch = RecordBatch(random_batch(rng, codec))
        assert batch.keyless_records() == keyless_by_decoding(batch), f"batch {i}"
        plain = BatchBuilder(codec)                  # the same records without headers: scanned
        for r in batch.records():
            plain.append(key=r.key, value=r.value, timestamp=r.timestamp, offset=r.offset)
        plain = RecordBatch(plain.build())
        assert plain.keyless_records() == keyless_by_decoding(plain) == keyless_by_decoding(batch)


def test_keyless_records_refuse_damaged_record_data():
    rng = random.Random(8)
    raised = 0
    for i in range(400):
        raw = bytearray(random_batch(rng, with_headers=i % 2 == 0))
        if len(raw) <= 61:
            continue
        at = rng.randrange(61, len(raw))
        raw[at] = rng.randrange(256)
        if rng.random() < 0.3:
            del raw[rng.randrange(61, len(raw)):]
            raw[8:12] = (len(raw) - 12).to_bytes(4, "big")
        batch = RecordBatch(raw)
        try:
            got = batch.keyless_records()
        except CorruptRecordError:
            raised += 1
            continue
        assert got == keyless_by_decoding(batch)     # what it accepts, a full decode reads the same
    assert raised > 50


def test_keyless_records_refuse_a_record_longer_than_its_fields():
    for headers in ((), [("h", b"v")]):
        b = BatchBuilder()
        b.append(key=b"k", value=b"", headers=headers, timestamp=0)
        raw = bytearray(b.build())
        assert raw[61] < 0x40                          # a one-byte record length
        raw[61] += 2                                   # zigzag: one byte more than it holds
        raw.append(0)
        raw[8:12] = (len(raw) - 12).to_bytes(4, "big")
        batch = RecordBatch(raw)
        for read in (lambda: list(batch.records()), batch.keyless_records):
            try:
                read()
            except CorruptRecordError:
                continue
            raise AssertionError(f"a record with a stray byte was read ({headers})")
