"""Kafka codec semantics the round trips do not pin down: defaults, ignorable, nullability,
tagged fields, zero-copy records, error codes, the generated-code contract."""

import os
import uuid

import pytest

from kbroker.wire import registry
from kbroker.wire.codegen import cli
from kbroker.wire.codegen.model import snake
from kbroker.wire.codegen.schema import Versions, protocol_dir, strip_comments
from kbroker.wire.errors import CodecError, Errors
from kbroker.wire.generated.api_versions_response import ApiVersionsResponse
from kbroker.wire.generated.fetch_request import FetchRequest
from kbroker.wire.generated.fetch_response import FetchResponse
from kbroker.wire.generated.metadata_request import MetadataRequest
from kbroker.wire.generated.metadata_response import MetadataResponse
from kbroker.wire.generated.produce_request import ProduceRequest
from kbroker.wire.generated.request_header import RequestHeader
from kbroker.wire.primitives import Writer, ZERO_UUID

HAVE_SCHEMAS = protocol_dir().is_dir()


# ----------------------------------------------------------------------------- contract

def test_class_shape_matches_developers_md():
    assert ProduceRequest.API_KEY == 0
    assert ProduceRequest.VALID_VERSIONS == (0, 11)
    assert ProduceRequest.FLEXIBLE_VERSIONS == (9, None)
    assert ProduceRequest.TopicProduceData.PartitionProduceData.__qualname__ == \
        "ProduceRequest.TopicProduceData.PartitionProduceData"
    r = ProduceRequest()
    assert r.transactional_id is None and r.acks == 0 and r.topic_data == []
    assert r.unknown_tagged_fields is None
    with pytest.raises(TypeError):
        ProduceRequest(0)   # keyword-only
    with pytest.raises(AttributeError):
        r.not_a_field = 1   # __slots__


def test_defaults_from_schema():
    assert FetchRequest().max_bytes == 0x7FFFFFFF          # hex default
    assert MetadataRequest().allow_auto_topic_creation is True   # "true"
    assert FetchRequest.FetchTopic().topic_id == ZERO_UUID
    p = FetchResponse.FetchableTopicResponse.PartitionData()
    assert p.last_stable_offset == -1 and p.aborted_transactions == [] and p.records is None
    # non-nullable struct fields default to a default instance, as Kafka does
    assert p.current_leader == FetchResponse.FetchableTopicResponse.PartitionData.LeaderIdAndEpoch()
    assert p.current_leader.leader_id == -1
    # mutable defaults are fresh per instance
    assert ProduceRequest().topic_data is not ProduceRequest().topic_data


def test_names_are_plain_snake_case():
    assert snake("TopicData") == "topic_data"
    assert snake("ThrottleTimeMs") == "throttle_time_ms"
    assert snake("KRaftVersion") == "k_raft_version"
    assert snake("V3AndBelowTopics") == "v3_and_below_topics"
    assert snake("clientHost") == "client_host"


def test_registry():
    assert registry.REQUESTS[0] is ProduceRequest
    assert registry.RESPONSES[18] is ApiVersionsResponse
    assert registry.api_name(0) == "Produce"
    assert registry.api_name(18) == "ApiVersions"
    assert registry.api_name(9999) == "Unknown(9999)"
    assert set(registry.REQUESTS) == set(registry.RESPONSES)
    for key, cls in registry.REQUESTS.items():
        assert cls.API_KEY == key and registry.RESPONSES[key].API_KEY == key
        assert registry.VERSIONS[key] == cls.VALID_VERSIONS
    assert registry.METADATA_RECORDS[2].__name__ == "TopicRecord"
    assert registry.METADATA_RECORDS[2].RECORD_TYPE == 2
    assert registry.METADATA_RECORDS[2].API_KEY is None


def test_header_versions():
    rq, rs = registry.request_header_version, registry.response_header_version
    assert rq(0, 8) == 1 and rq(0, 9) == 2            # Produce flexible from 9
    assert rq(3, 0) == 1 and rq(3, 9) == 2            # Metadata flexible from 9
    assert rq(7, 0) == 0 and rq(7, 1) == 1 and rq(7, 3) == 2   # ControlledShutdown v0: header v0
    assert rq(18, 3) == 2 and rq(18, 2) == 1
    assert rs(0, 8) == 0 and rs(0, 9) == 1
    assert rs(18, 0) == 0 and rs(18, 3) == 0 and rs(18, 4) == 0   # ApiVersions: always v0
    with pytest.raises(CodecError):
        rq(9999, 0)


def test_errors_enum():
    assert Errors.NONE == 0
    assert Errors.UNKNOWN_TOPIC_OR_PARTITION == 3
    assert Errors.UNKNOWN_SERVER_ERROR == -1
    assert Errors.UNKNOWN_TOPIC_OR_PARTITION.retriable
    assert Errors.NOT_LEADER_OR_FOLLOWER.retriable
    assert not Errors.NONE.retriable and not Errors.TOPIC_AUTHORIZATION_FAILED.retriable
    assert Errors.OFFSET_OUT_OF_RANGE.exception_name == "OffsetOutOfRangeException"
    assert Errors(6) is Errors.NOT_LEADER_OR_FOLLOWER
    assert issubclass(CodecError, ValueError)
    if HAVE_SCHEMAS:
        lines = (protocol_dir() / "errors.tsv").read_text().strip().splitlines()[1:]
        assert len(Errors) == len(lines)


# ----------------------------------------------------------------------------- semantics

def test_non_default_field_missing_from_version_raises_unless_ignorable():
    # AllowAutoTopicCreation is v4+ and not ignorable: False cannot be expressed in v3
    with pytest.raises(CodecError, match="allow_auto_topic_creation"):
        MetadataRequest(topics=None, allow_auto_topic_creation=False).encode(3)
    MetadataRequest(topics=None, allow_auto_topic_creation=True).encode(3)
    # ThrottleTimeMs is v1+ and ignorable: silently dropped at v0
    r = FetchResponse(throttle_time_ms=100)
    assert FetchResponse.decode(r.encode(0), 0).throttle_time_ms == 0


def test_nullability_follows_versions():
    # Metadata topics: null = all topics from v1; v0 has no null
    assert MetadataRequest.decode(MetadataRequest(topics=None).encode(1), 1).topics is None
    with pytest.raises(CodecError, match="non-nullable"):
        MetadataRequest(topics=None).encode(0)
    with pytest.raises(CodecError, match="non-nullable"):
        MetadataRequest.decode(b"\xff\xff\xff\xff", 0)


def test_compact_and_legacy_encodings():
    t = MetadataRequest.MetadataRequestTopic(name="ab")
    assert MetadataRequest(topics=[t]).encode(0) == b"\x00\x00\x00\x01\x00\x02ab"
    # v12: compact array (len+1), uuid, compact nullable string (len+1), tag sections
    v12 = MetadataRequest(topics=[t], allow_auto_topic_creation=False).encode(12)
    assert v12 == b"\x02" + bytes(16) + b"\x03ab" + b"\x00" + b"\x00" + b"\x00" + b"\x00"


def test_request_header_client_id_is_never_compact():
    h = RequestHeader(request_api_key=18, request_api_version=3, correlation_id=7, client_id="cli")
    assert h.encode(2) == b"\x00\x12\x00\x03\x00\x00\x00\x07\x00\x03cli\x00"
    assert h.encode(1) == b"\x00\x12\x00\x03\x00\x00\x00\x07\x00\x03cli"
    assert RequestHeader(request_api_key=7, correlation_id=1, client_id=None).encode(0) == \
        b"\x00\x07\x00\x00\x00\x00\x00\x01"


def test_tagged_fields_written_only_when_not_default_and_read_back():
    P = FetchResponse.FetchableTopicResponse.PartitionData
    plain = P(partition_index=1).encode(12)
    tagged = P(partition_index=1, current_leader=P.LeaderIdAndEpoch(leader_id=3, leader_epoch=9))
    data = tagged.encode(12)
    assert len(data) > len(plain)
    assert data.endswith(b"\x01\x01\x09" + b"\x00\x00\x00\x03\x00\x00\x00\x09\x00")  # 1 tag, tag 1, 9 bytes
    back = P.decode(data, 12)
    assert back.current_leader.leader_id == 3 and back == tagged
    # a tagged field holding a value cannot go to a version without it
    with pytest.raises(CodecError, match="current_leader"):
        tagged.encode(11)


def test_unknown_tagged_fields_are_preserved_in_tag_order():
    r = ApiVersionsResponse(unknown_tagged_fields=[(7, b"xyz")], zk_migration_ready=True)
    back = ApiVersionsResponse.decode(r.encode(3), 3)
    assert back.unknown_tagged_fields == [(7, b"xyz")] and back.zk_migration_ready is True
    assert back.encode(3) == r.encode(3)
    assert r.encode(3).endswith(b"\x02\x03\x01\x01\x07\x03xyz")   # tag 3 (known) before tag 7
    with pytest.raises(CodecError, match="not flexible"):
        ApiVersionsResponse(unknown_tagged_fields=[(7, b"x")]).encode(2)


def test_records_decode_zero_copy_and_regions_stay_out_of_the_buffer():
    payload = bytes(range(256)) * 8
    P = ProduceRequest
    req = P(acks=1, topic_data=[P.TopicProduceData(name="t", partition_data=[
        P.TopicProduceData.PartitionProduceData(index=0, records=payload)])])
    data = req.encode(9)
    back = ProduceRequest.decode(data, 9)
    rec = back.topic_data[0].partition_data[0].records
    assert type(rec) is memoryview and rec.obj is data and rec == payload

    class Region:   # a log FileRegion stand-in: .size, no buffer protocol
        size = 1 << 20

    region = Region()
    F = FetchResponse
    resp = F(responses=[F.FetchableTopicResponse(topic="t", partitions=[
        F.FetchableTopicResponse.PartitionData(records=region)])])
    w = Writer()
    resp.encode_into(w, 11)             # records are the last bytes of a v11 response
    assert w.chunks()[1] is region and len(w.chunks()) == 2
    w = Writer()
    resp.encode_into(w, 12)             # v12+: tag sections follow the records
    chunks = w.chunks()
    assert chunks[1] is region and len(chunks) == 3
    assert w.size == len(chunks[0]) + region.size + len(chunks[2])
    with pytest.raises(CodecError, match="region"):
        resp.encode(11)


def test_bad_values_raise_codec_error():
    with pytest.raises(CodecError):
        ProduceRequest(acks=1 << 20).encode(3)       # int16 overflow
    with pytest.raises(CodecError):
        ProduceRequest(topic_data=[object()]).encode(3)
    with pytest.raises(CodecError):
        ProduceRequest.TopicProduceData(name=None).encode(3)
    with pytest.raises(CodecError):
        ProduceRequest().encode(12)                   # no such version
    with pytest.raises(CodecError):
        ProduceRequest.decode(ProduceRequest().encode(3) + b"\x00", 3)   # trailing bytes
    with pytest.raises(CodecError):
        ProduceRequest.TopicProduceData(name="x" * 40000).encode(3)   # string > 32767 bytes


def test_equality_and_repr():
    a = MetadataResponse.MetadataResponseTopic(name="t", topic_id=uuid.UUID(int=5))
    b = MetadataResponse.MetadataResponseTopic(name="t", topic_id=uuid.UUID(int=5))
    assert a == b and a != MetadataResponse.MetadataResponseTopic(name="u")
    assert "name='t'" in repr(a)
    assert a.to_dict()["name"] == "t"


# ----------------------------------------------------------------------------- codegen

def test_schema_helpers():
    assert strip_comments('{"a": "x//y", // c\n "b": 1}') == '{"a": "x//y", \n "b": 1}'
    assert Versions.parse("3+") == Versions(3, None)
    assert Versions.parse("1-4") == Versions(1, 4)
    assert Versions.parse("none").empty
    assert Versions.parse("2") == Versions(2, 2)


def test_protocol_dir_env_override(monkeypatch, tmp_path):
    monkeypatch.setenv("KBROKER_PROTOCOL_DIR", str(tmp_path))
    assert protocol_dir() == tmp_path
    monkeypatch.delenv("KBROKER_PROTOCOL_DIR")
    assert protocol_dir().parts[-2:] == ("shared", "kafka-protocol")


@pytest.mark.skipif(not HAVE_SCHEMAS, reason="kafka-protocol schemas not found")
def test_generated_code_is_up_to_date_and_drift_is_caught(capsys):
    files = cli.render()
    assert cli.check(files) == 0, capsys.readouterr().out
    path = cli.GENERATED_DIR / "produce_request.py"
    changed = dict(files)
    changed[path] = files[path].replace("acks", "ack5", 1)
    assert cli.check(changed) == 1
    assert "produce_request.py" in capsys.readouterr().out
    fewer = {p: t for p, t in files.items() if p != path}
    assert cli.check(fewer) == 1 and "stale" in capsys.readouterr().out


def test_generated_files_are_marked():
    gen = cli.GENERATED_DIR
    files = sorted(gen.glob("*.py"))
    assert len(files) > 240
    for p in files:
        first = p.read_text().splitlines()[0]
        assert first.startswith("# @generated by kbroker.wire.codegen") and first.endswith("DO NOT EDIT."), p
    assert (gen / "produce_request.py").read_text().splitlines()[0] == \
        "# @generated by kbroker.wire.codegen from clients/ProduceRequest.json. DO NOT EDIT."
    assert not list(gen.glob("*.json")) and not os.path.exists(cli.WIRE_DIR / "clients")


def test_schema_tag_outside_its_versions_is_rejected_like_kafka():
    # FetchRequest tag 1 is ReplicaState, defined for v15+; at v12 Kafka rejects it
    data = FetchRequest(unknown_tagged_fields=[(1, b"\x00")]).encode(12)
    with pytest.raises(CodecError, match="not valid for version 12"):
        FetchRequest.decode(data, 12)
    back = FetchRequest.decode(FetchRequest(unknown_tagged_fields=[(9, b"\x00")]).encode(12), 12)
    assert back.unknown_tagged_fields == [(9, b"\x00")]
