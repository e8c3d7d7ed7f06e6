"""Golden bytes: requests captured from real clients (tests/wire/golden/, see README.md there).

Each fixture must decode, and re-encoding the decoded header and request must give back the
client's exact bytes: that checks field order, compact vs legacy encodings, nullability and
tagged fields against what the clients really send.
"""

from pathlib import Path

import pytest

from kbroker.wire.frame import decode_request, decode_request_header
from kbroker.wire.primitives import Writer
from kbroker.wire.records import iter_batches
from kbroker.wire.registry import request_header_version

GOLDEN = Path(__file__).parent / "golden"
FIXTURES = sorted(GOLDEN.glob("*/*/*.hex"))   # <client>/<scenario>/<nn>_<Api>_v<N>.hex

# Real-world oddities: the client's bytes decode, but carry bytes a re-encoding does not have.
QUIRKS = {
    # librdkafka reserves 4 bytes for an array count and erases the unused ones once it knows
    # the count; for the null ("all topics") compact array it leaves 3 zero bytes behind.
    # Kafka reads allow_auto_topic_creation, include_topic_authorized_operations and the tag
    # count from those zeros and ignores the 3 bytes left at the end; so do we.
    "confluent-kafka/quirks/00_Metadata_v12": 3,
}


def load(path: Path) -> bytes:
    return bytes.fromhex("".join(ln for ln in path.read_text().splitlines() if not ln.startswith("#")))


def test_fixtures_exist_for_every_client():
    clients = {p.parent.parent.name for p in FIXTURES}
    assert {"kafka-python", "aiokafka", "confluent-kafka", "kcat", "java-3.9.0", "java-4.3.0"} <= clients
    for c in clients:
        for scenario in ("bootstrap", "produce", "fetch"):
            assert list((GOLDEN / c / scenario).glob("*.hex")), (c, scenario)


def fid(p: Path) -> str:
    return f"{p.parent.parent.name}/{p.parent.name}/{p.stem}"


@pytest.mark.parametrize("path", FIXTURES, ids=fid)
def test_golden_request_decodes_and_reencodes_exactly(path):
    frame = load(path)
    header, req = decode_request(frame)
    api, _, ver = path.stem.split("_", 1)[1].rpartition("_v")
    assert header.request_api_version == int(ver)
    assert header.client_id.startswith("golden-")
    w = Writer()
    header.encode_into(w, request_header_version(header.request_api_key, header.request_api_version))
    req.encode_into(w, header.request_api_version)
    extra = QUIRKS.get(fid(path), 0)
    assert bytes(w) + frame[len(frame) - extra:] == frame
    assert len(w) == len(frame) - extra


def test_what_the_clients_said():
    def req(client, name, scenario="bootstrap"):
        return decode_request(load(GOLDEN / client / scenario / name))

    h, av = req("java-4.3.0", "00_ApiVersions_v4.hex")
    assert (av.client_software_name, av.client_software_version) == ("apache-kafka-java", "4.3.0")
    assert h.client_id == "golden-java"
    _, av = req("confluent-kafka", "00_ApiVersions_v3.hex")
    assert av.client_software_name == "confluent-kafka-python"
    _, md = req("kcat", "01_Metadata_v4.hex")
    assert md.topics == [] and md.allow_auto_topic_creation is False   # first: brokers only
    _, md = req("confluent-kafka", "00_Metadata_v12.hex", "quirks")
    assert md.topics is None                                          # all topics
    _, md = req("aiokafka", "01_Metadata_v5.hex")
    assert md.topics == []
    h, _ = decode_request_header(load(GOLDEN / "aiokafka" / "bootstrap" / "00_ApiVersions_v0.hex"))
    assert h.client_id == "golden-aiokafka"


PRODUCE = [p for p in FIXTURES if "_Produce_" in p.name]
FETCH = [p for p in FIXTURES if "_Fetch_" in p.name]


@pytest.mark.parametrize("path", PRODUCE, ids=fid)
def test_golden_produce_carries_the_record_as_a_view_of_the_frame(path):
    frame = load(path)
    _, req = decode_request(frame)
    (topic,) = req.topic_data
    (part,) = topic.partition_data
    assert topic.name == "golden-topic" and part.index == 0
    rec = part.records
    assert type(rec) is memoryview and rec.obj is frame          # zero copy
    batches = list(iter_batches(rec))
    assert batches and all(b.verify_crc() for b in batches)
    values = [r.value for b in batches for r in b.records()]
    assert values == [b"golden value"]


@pytest.mark.parametrize("path", FETCH, ids=fid)
def test_golden_fetch_asks_for_partition_zero_from_offset_zero(path):
    _, req = decode_request(load(path))
    (topic,) = req.topics
    (part,) = topic.partitions
    assert part.partition == 0 and part.fetch_offset == 0
    if _version(path) >= 13:
        assert topic.topic_id.hex == "2c9b3d476f1e4a5b8c3d9e0f1a2b3c4d"   # the id our Metadata gave
    else:
        assert topic.topic == "golden-topic"


def _version(path: Path) -> int:
    return int(path.stem.rpartition("_v")[2])
