"""Golden bytes from an independent implementation (see records_golden/README.md)."""

import json
from pathlib import Path

import pytest
from crc32c import crc32c

from kbroker.wire.legacy_records import decode_legacy_message_set
from kbroker.wire.records import BatchBuilder, Record, RecordBatch, validate_produce_records

GOLDEN = Path(__file__).parent / "records_golden"
EXPECTED = json.loads((GOLDEN / "expected.json").read_text())["files"]


def _h(x):
    return None if x is None else bytes.fromhex(x)


def _expected_records(spec, offset_shift=0):
    return [
        Record(
            r["offset"] + offset_shift,
            r["timestamp"],
            _h(r["key"]),
            _h(r["value"]),
            [(k, _h(v)) for k, v in r["headers"]],
        )
        for r in spec["records"]
    ]


def test_crc32c_known_answer():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(b"") == 0


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if n.startswith("v2_")))
def test_v2_golden(name):
    spec = EXPECTED[name]
    data = (GOLDEN / name).read_bytes()
    [b] = validate_produce_records(data)
    assert b.size == len(data)
    assert b.compression == spec["compression"]
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (
        spec["producer_id"],
        spec["producer_epoch"],
        spec["base_sequence"],
    )
    assert list(b.records()) == _expected_records(spec)


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if not n.startswith("v2_")))
def test_legacy_golden(name):
    spec = EXPECTED[name]
    data = (GOLDEN / name).read_bytes()
    got = list(decode_legacy_message_set(data))
    # magic 1 wrappers from a client carry offset 0: inner offsets end at 0
    shift = -(len(spec["records"]) - 1) if spec["magic"] == 1 else 0
    assert got == _expected_records(spec, shift)


def test_builder_reproduces_golden_bytes():
    spec = EXPECTED["v2_none.bin"]
    bb = BatchBuilder(
        0,
        producer_id=spec["producer_id"],
        producer_epoch=spec["producer_epoch"],
        base_sequence=spec["base_sequence"],
        partition_leader_epoch=0,  # kafka-python writes 0; Java producers write -1
    )
    for r in _expected_records(spec):
        bb.append(key=r.key, value=r.value, headers=r.headers, timestamp=r.timestamp)
    assert bb.build() == (GOLDEN / "v2_none.bin").read_bytes()
    # and every compressed golden matches a batch we build once decompressed
    ours = RecordBatch(bb.build())
    for name in ("v2_gzip.bin", "v2_snappy.bin", "v2_lz4.bin", "v2_zstd.bin"):
        theirs = RecordBatch((GOLDEN / name).read_bytes())
        assert bytes(theirs.records_bytes()) == bytes(ours.records_bytes())
