"""The OTLP reader and the telemetry store, on hand-encoded protobuf."""
import struct
import uuid

from kbroker.metrics.otlp import decode_metrics
from kbroker.metrics.telemetry import ZSTD, ClientTelemetry
from kbroker.wire.compression import zstd_compress
from kbroker.wire.errors import Errors


def _v(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _f(num, wt, payload):
    key = _v(num << 3 | wt)
    return key + (_v(len(payload)) + payload if wt == 2 else payload)


def _kv(k, s):
    return _f(1, 2, k.encode()) + _f(2, 2, _f(1, 2, s.encode()))


def _metrics(name, value, attrs=()):
    point = _f(4, 1, struct.pack("<d", value)) + b"".join(_f(7, 2, _kv(k, v)) for k, v in attrs)
    metric = _f(1, 2, name.encode()) + _f(5, 2, _f(1, 2, point))
    resource = _f(1, 2, _kv("client_id", "app-1"))
    return _f(1, 2, _f(1, 2, resource) + _f(2, 2, _f(2, 2, metric)))


def test_decode_gauge_with_attributes():
    res, pts = decode_metrics(_metrics("org.apache.kafka.producer.x", 2.5, [("node.id", "1")]))
    assert res == {"client_id": "app-1"}
    assert pts == [("org.apache.kafka.producer.x", {"node.id": "1"}, 2.5)]


def test_push_checks_subscription_size_and_filters_prefixes():
    t = ClientTelemetry(["org.apache.kafka.producer."], 1000, max_bytes=4096)
    cid = t.subscription(uuid.UUID(int=0))
    assert cid.int != 0
    data = zstd_compress(_metrics("org.apache.kafka.producer.x", 3.0))
    assert t.push(cid, t.subscription_id + 1, ZSTD, data, 0) == Errors.UNKNOWN_SUBSCRIPTION_ID
    assert t.push(cid, t.subscription_id, 0, b"\x00" * 5000, 0) == Errors.TELEMETRY_TOO_LARGE
    assert t.push(cid, t.subscription_id, 0, b"\x0f\xff", 0) == Errors.INVALID_RECORD
    assert t.push(cid, t.subscription_id, ZSTD, data, 0) == 0
    assert t.push(cid, t.subscription_id, 0, _metrics("org.apache.kafka.consumer.y", 1.0), 0) == 0
    fams = {f.name: f for f in t.families()}
    assert fams["org_apache_kafka_producer_x"].samples[0].value == 3.0
    assert fams["org_apache_kafka_producer_x"].samples[0].labels == {"client_instance_id": str(cid), "client_id": "app-1"}
    assert "org_apache_kafka_consumer_y" not in fams
