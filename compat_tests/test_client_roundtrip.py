"""Every stock client: create a topic, produce keyed records with headers under every codec,
read them back from the beginning and compare everything; ListOffsets; configs; delete.
(issue 4)"""
from __future__ import annotations

import random
import shutil
import time
from collections import defaultdict

import pytest

from compat_tests.clients import CODECS, Rec, driver
from compat_tests.clients import java as java_client

CLIENTS = ["confluent-kafka", "kafka-python", "aiokafka", "kcat", "java-4.3.0", "java-3.9.0"]
PARTITIONS = 3
PER_CODEC = 200


def require(client: str) -> None:
    if client == "kcat" and shutil.which("kcat") is None:
        pytest.fail("kcat is not installed: run scripts/test.sh (apt-get install kcat)")
    if client.startswith("java-") and not java_client.available(client.removeprefix("java-")):
        pytest.fail("Java client jars missing: run scripts/fetch-java-clients.sh")


def make_records(client, codec: str, n: int, seed: int) -> list[Rec]:
    rnd = random.Random(seed)
    base_ts = int(time.time() * 1000) - 60_000
    text_only = client.name == "kcat"
    out = []
    for i in range(n):
        key = f"key-{rnd.randrange(12)}".encode()
        if text_only:
            value = f"v{i}-{codec}-".encode() + bytes(rnd.choice(b"abcdefgh") for _ in range(rnd.randrange(0, 300)))
            headers = (("codec", codec.encode()), ("client", b"kcat"))
        else:
            value = rnd.randbytes(rnd.randrange(0, 2000)) if i % 17 else None
            # kafka-python cannot send a header with a null value; the others can.
            null = None if getattr(client, "null_header_values", True) and i % 5 == 0 else b""
            headers = (("idx", str(i).encode()), ("codec", codec.encode()), ("empty", null))
        out.append(Rec(key, value, base_ts + i, headers))
    return out


@pytest.mark.parametrize("client_name", CLIENTS)
def test_produce_consume_every_codec(shared_broker, client_name):
    require(client_name)
    client = driver(client_name, shared_broker.bootstrap)
    topic = f"rt-{client_name.replace('.', '-')}"
    client.create_topic(topic, PARTITIONS)

    produced: list[tuple[Rec, tuple | None]] = []
    for seed, codec in enumerate(CODECS):
        recs = make_records(client, codec, PER_CODEC, seed)
        acks = client.produce(topic, recs, codec)
        produced += list(zip(recs, acks or [None] * len(recs)))

    total = len(produced)
    got = client.consume(topic, total)
    assert len(got) == total, f"consumed {len(got)} of {total}"

    # Every acknowledged (partition, offset) holds exactly the record that was sent there.
    by_pos = {(c.partition, c.offset): c for c in got}
    assert len(by_pos) == total, "duplicate positions"
    sets_ts = getattr(client, "sets_timestamps", True)
    for rec, ack in produced:
        if ack is None:
            continue
        c = by_pos[ack]
        assert (c.key, c.value, c.headers) == (rec.key, rec.value, rec.headers)
        if sets_ts:
            assert c.timestamp == rec.timestamp

    # Without acks (kcat): the same multiset of records, in the same order per key.
    per_key_sent = defaultdict(list)
    for rec, _ in produced:
        per_key_sent[rec.key].append((rec.value, rec.headers))
    per_key_got = defaultdict(list)
    key_partition = {}
    for c in sorted(got, key=lambda c: (c.partition, c.offset)):
        per_key_got[c.key].append((c.value, c.headers))
        assert key_partition.setdefault(c.key, c.partition) == c.partition, "key moved partition"
    assert per_key_got == per_key_sent

    latest = client.latest_offsets(topic)
    assert sorted(latest) == list(range(PARTITIONS))
    assert sum(latest.values()) == total
    for p, off in latest.items():
        assert off == 1 + max(c.offset for c in got if c.partition == p)

    if hasattr(client, "describe_configs") and client_name != "kcat":
        before = client.describe_configs(topic)
        assert before["cleanup.policy"] == "delete"
        assert before["retention.ms"] == "604800000"
        client.alter_config(topic, "retention.ms", "3600000")
        after = client.describe_configs(topic)
        assert after["retention.ms"] == "3600000"

    client.delete_topic(topic)
    deadline = time.monotonic() + 15
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    while topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    assert topic not in admin.list_topics(timeout=10).topics
