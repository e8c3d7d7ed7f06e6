"""kbroker's operator tools driven as a user would (``python -m kbroker <tool> ...``) against a
real broker, each checked against what a stock client (confluent-kafka) shows (issue 14)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from compat_tests.brokers import REPO
from compat_tests.ops_util import kbroker

T = 30


@pytest.fixture(scope="module")
def admin(shared_broker):
    return AdminClient({"bootstrap.servers": shared_broker.bootstrap})


def _consume_all(bootstrap, topic, n, **conf):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chk-{topic}-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})
    c.subscribe([topic])
    out = []
    deadline = time.monotonic() + T
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m)
    c.close()
    return out


def test_topics_create_describe_alter_delete(shared_broker, admin):
    b = ["--bootstrap-server", shared_broker.bootstrap]
    out = kbroker("topics", *b, "--create", "--topic", "tt-a", "--partitions", "3", "--config", "retention.ms=123456").stdout.decode()
    assert out.strip() == "Created topic tt-a."
    md = admin.list_topics("tt-a", timeout=T).topics["tt-a"]
    assert sorted(md.partitions) == [0, 1, 2]
    res = ConfigResource(ResourceType.TOPIC, "tt-a")
    assert admin.describe_configs([res])[res].result(T)["retention.ms"].value == "123456"
    # an existing topic: error without --if-not-exists, quiet with it
    assert kbroker("topics", *b, "--create", "--topic", "tt-a", check=False).returncode == 1
    kbroker("topics", *b, "--create", "--topic", "tt-a", "--if-not-exists")
    assert "tt-a" in kbroker("topics", *b, "--list").stdout.decode().split()

    desc = kbroker("topics", *b, "--describe", "--topic", "tt-a").stdout.decode()
    head, *rows = desc.strip().splitlines()
    assert re.match(r"Topic: tt-a\tTopicId: \S+\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=123456", head)
    for row in rows:
        p = int(re.search(r"Partition: (\d+)", row).group(1))
        cp = md.partitions[p]
        assert f"Leader: {cp.leader}\t" in row
        assert f"Replicas: {','.join(map(str, cp.replicas))}\t" in row
        assert f"Isr: {','.join(map(str, cp.isrs))}\t" in row
    assert len(rows) == 3
    # one node: nothing is under-replicated
    assert kbroker("topics", *b, "--describe", "--under-replicated-partitions").stdout.decode().strip() == ""

    kbroker("topics", *b, "--alter", "--topic", "tt-a", "--partitions", "5")
    deadline = time.monotonic() + 10
    while len(admin.list_topics("tt-a", timeout=T).topics["tt-a"].partitions) != 5:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    kbroker("topics", *b, "--delete", "--topic", "tt-a")
    assert "tt-a" not in admin.list_topics(timeout=T).topics


def test_configs_alter_and_describe(shared_broker, admin):
    b = ["--bootstrap-server", shared_broker.bootstrap]
    kbroker("topics", *b, "--create", "--topic", "tt-cfg")
    out = kbroker("configs", *b, "--alter", "--entity-type", "topics", "--entity-name", "tt-cfg",
                  "--add-config", "retention.ms=5000,cleanup.policy=[compact,delete]").stdout.decode()
    assert out.strip() == "Completed updating config for topic tt-cfg."
    res = ConfigResource(ResourceType.TOPIC, "tt-cfg")
    entries = admin.describe_configs([res])[res].result(T)
    assert entries["retention.ms"].value == "5000"
    assert entries["cleanup.policy"].value == "compact,delete"
    desc = kbroker("configs", *b, "--describe", "--topic", "tt-cfg").stdout.decode().splitlines()
    assert desc[0] == "Dynamic configs for topic tt-cfg are:"
    assert any(line.startswith("  retention.ms=5000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=5000")
               for line in desc)
    kbroker("configs", *b, "--alter", "--topic", "tt-cfg", "--delete-config", "retention.ms")
    assert admin.describe_configs([res])[res].result(T)["retention.ms"].value == "604800000"
    # brokers: --all lists static ones too
    alls = kbroker("configs", *b, "--describe", "--entity-type", "brokers", "--entity-name", "1", "--all").stdout.decode()
    assert "All configs for broker 1 are:" in alls and "  log.segment.bytes=" in alls


def test_console_producer_and_consumer(shared_broker, admin):
    b = ["--bootstrap-server", shared_broker.bootstrap]
    kbroker("topics", *b, "--create", "--topic", "tt-con", "--partitions", "3")
    lines = [f"src:app,n:{i}\tkey{i}\tvalue {i}" for i in range(30)]
    kbroker("console-producer", *b, "--topic", "tt-con", "--property", "parse.key=true",
            "--property", "parse.headers=true", input="\n".join(lines) + "\n")
    got = _consume_all(shared_broker.bootstrap, "tt-con", 30)
    assert len(got) == 30
    by_key = {m.key().decode(): m for m in got}
    for i in range(30):
        m = by_key[f"key{i}"]
        assert m.value() == f"value {i}".encode()
        assert m.headers() == [("src", b"app"), ("n", str(i).encode())]
    # keyed records land where Java's murmur2 partitioner puts them: 'key0' -> a fixed partition
    from kbroker.tools.partitioner import partition_for_key
    assert all(m.partition() == partition_for_key(m.key(), 3) for m in got)

    # the consumer prints what a stock producer wrote, in Kafka's default format
    p = Producer({"bootstrap.servers": shared_broker.bootstrap})
    p.produce("tt-con", key=b"ck", value=b"cv", partition=1, timestamp=1700000000123, headers=[("h", b"x")])
    assert p.flush(T) == 0
    lo, hi = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "x"}).get_watermark_offsets(
        TopicPartition("tt-con", 1), timeout=T)
    out = kbroker("console-consumer", *b, "--topic", "tt-con", "--partition", "1", "--offset", str(hi - 1),
                  "--max-messages", "1", "--property", "print.key=true", "--property", "print.timestamp=true",
                  "--property", "print.headers=true", "--property", "print.offset=true",
                  "--property", "print.partition=true").stdout.decode()
    assert out == f"CreateTime:1700000000123\tPartition:1\tOffset:{hi - 1}\th:x\tck\tcv\n"
    js = kbroker("console-consumer", *b, "--topic", "tt-con", "--from-beginning", "--timeout-ms", "1500",
                 "--formatter", "json", "--group", "tt-con-g").stdout.decode().splitlines()
    assert len(js) == 31 and {json.loads(x)["key"] for x in js} == {f"key{i}" for i in range(30)} | {"ck"}
    # with --group the position was committed: a stock client sees it
    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "tt-con-g"})
    committed = c.committed([TopicPartition("tt-con", i) for i in range(3)], timeout=T)
    c.close()
    ends = {}
    for i in range(3):
        ends[i] = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "x"}).get_watermark_offsets(
            TopicPartition("tt-con", i), timeout=T)[1]
    assert {tp.partition: tp.offset for tp in committed} == ends


def test_get_offsets_and_delete_records(shared_broker, tmp_path):
    b = ["--bootstrap-server", shared_broker.bootstrap]
    kbroker("topics", *b, "--create", "--topic", "tt-off", "--partitions", "2")
    p = Producer({"bootstrap.servers": shared_broker.bootstrap})
    for i in range(10):
        p.produce("tt-off", value=b"v", partition=i % 2, timestamp=1_000_000 + i)
    assert p.flush(T) == 0
    out = kbroker("get-offsets", *b, "--topic", "tt-off").stdout.decode()
    assert out.split() == ["tt-off:0:5", "tt-off:1:5"]
    out = kbroker("get-offsets", *b, "--topic-partitions", "tt-off:1", "--time", "1000004").stdout.decode()
    assert out.split() == ["tt-off:1:2"]   # first record of partition 1 at or after ts 1000004 (offset 2)
    plan = tmp_path / "del.json"
    plan.write_text(json.dumps({"partitions": [{"topic": "tt-off", "partition": 0, "offset": 3}], "version": 1}))
    out = kbroker("delete-records", *b, "--offset-json-file", str(plan)).stdout.decode()
    assert "partition: tt-off-0\tlow_watermark: 3" in out
    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "x"})
    assert c.get_watermark_offsets(TopicPartition("tt-off", 0), timeout=T) == (3, 5)
    c.close()
    assert kbroker("get-offsets", *b, "--topic", "tt-off", "--time", "earliest").stdout.decode().split() == \
        ["tt-off:0:3", "tt-off:1:0"]


def test_dump_log_reads_segments_indexes_and_metadata(shared_broker):
    b = ["--bootstrap-server", shared_broker.bootstrap]
    kbroker("topics", *b, "--create", "--topic", "tt-dump")
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 50})
    for i in range(7):
        p.produce("tt-dump", key=b"k%d" % i, value=b"v%d" % i, headers=[("hk", b"hv")])
    assert p.flush(T) == 0
    d = Path(shared_broker.data_dir) / "logs" / "tt-dump-0"
    seg = d / "00000000000000000000.log"
    out = kbroker("dump-log", "--files", f"{seg},{d / '00000000000000000000.index'}", "--print-data-log").stdout.decode()
    recs = re.findall(r"\| offset: (\d+) CreateTime: \d+ keySize: 2 valueSize: 2 sequence: (-?\d+) headerKeys: \[hk\] key: (k\d) payload: (v\d)", out)
    assert [(int(o), k, v) for o, _, k, v in recs] == [(i, f"k{i}", f"v{i}") for i in range(7)]
    assert "isvalid: true" in out and "isvalid: false" not in out
    assert out.count("baseOffset: ") >= 1
    meta = Path(shared_broker.data_dir) / "logs" / "__cluster_metadata-0" / "00000000000000000000.log"
    out = kbroker("dump-log", "--files", str(meta), "--cluster-metadata-decoder").stdout.decode()
    assert '"type":"TOPIC_RECORD"' in out and '"name":"tt-dump"' in out


def test_dump_log_of_a_live_fsync_segment_stops_at_the_zeros_written_ahead(shared_broker):
    b = ["--bootstrap-server", shared_broker.bootstrap]
    kbroker("topics", *b, "--create", "--topic", "tt-dump-fsync", "--config", "flush.messages=1")
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": "all"})
    for i in range(5):
        p.produce("tt-dump-fsync", value=b"v%d" % i)
        assert p.flush(T) == 0     # one append each
    seg = Path(shared_broker.data_dir) / "logs" / "tt-dump-fsync-0" / "00000000000000000000.log"
    for _ in range(100):           # the filler thread runs beside the appends
        if seg.stat().st_size > 64 << 10:
            break
        time.sleep(0.05)
    out = kbroker("dump-log", "--files", str(seg), "--print-data-log").stdout.decode()
    assert re.findall(r"payload: (v\d)", out) == [f"v{i}" for i in range(5)]
    assert re.search(r"Zero-filled tail of \d+ bytes from position \d+", out), out[-500:]


def test_perf_produce_and_consume(shared_broker, admin, tmp_path):
    b = ["--bootstrap-server", shared_broker.bootstrap]
    kbroker("topics", *b, "--create", "--topic", "tt-perf", "--partitions", "2")
    svg = tmp_path / "p.svg"
    out = kbroker("perf", "produce", "--topic", "tt-perf", "--num-records", "20000", "--record-size", "100",
                  "--throughput", "-1", "--producer-props", f"bootstrap.servers={shared_broker.bootstrap}", "acks=all",
                  "--plot", str(svg)).stdout.decode()
    assert re.search(r"^20000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
                     r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99.9th\.$", out, re.M)
    assert re.search(r"^\| records\s+\|\s+20000 \|$", out, re.M) and re.search(r"^\| errors\s+\|\s+0 \|$", out, re.M)
    assert svg.read_text().startswith("<svg")
    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "x"})
    total = sum(c.get_watermark_offsets(TopicPartition("tt-perf", i), timeout=T)[1] for i in range(2))
    c.close()
    assert total == 20000
    out = kbroker("perf", "consume", *b, "--topic", "tt-perf", "--messages", "20000").stdout.decode()
    lines = out.splitlines()
    assert lines[0].startswith("start.time, end.time, data.consumed.in.MB")
    fields = [x.strip() for x in lines[1].split(",")]
    assert fields[4] == "20000" and abs(float(fields[2]) - 20000 * 100 / 1024 / 1024) < 0.001


def test_console_consumers_in_one_group_split_the_partitions(shared_broker, admin):
    """Two ``console-consumer --group`` processes join one group (KIP-848): each is given part
    of the partitions, together they print every record once, and their positions are
    committed (a stock client sees them)."""
    b = ["--bootstrap-server", shared_broker.bootstrap]
    topic, group = "tt-con-split", "tt-con-split-g"
    kbroker("topics", *b, "--create", "--topic", topic, "--partitions", "4")
    cmd = [sys.executable, "-m", "kbroker", "console-consumer", *b, "--topic", topic, "--group", group,
           "--from-beginning", "--timeout-ms", "8000", "--property", "print.partition=true"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(2)]
    try:
        deadline = time.monotonic() + T
        while True:          # both members joined and each owns partitions
            d = admin.describe_consumer_groups([group])[group].result(T)
            owners = [len(m.assignment.topic_partitions) for m in d.members]
            if sorted(owners) == [2, 2]:
                break
            assert time.monotonic() < deadline, f"group never split: {owners}"
            time.sleep(0.2)
        p = Producer({"bootstrap.servers": shared_broker.bootstrap})
        for i in range(40):
            p.produce(topic, value=f"v{i}".encode(), partition=i % 4)
        assert p.flush(T) == 0
        outs = [pr.communicate(timeout=60)[0].decode().splitlines() for pr in procs]
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
    values = [line.split("\t")[1] for out in outs for line in out]
    assert sorted(values) == sorted(f"v{i}" for i in range(40))         # every record once
    parts = [{line.split("\t")[0] for line in out} for out in outs]
    assert all(len(ps) == 2 for ps in parts) and not parts[0] & parts[1], parts
    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group})
    committed = c.committed([TopicPartition(topic, i) for i in range(4)], timeout=T)
    c.close()
    assert {tp.partition: tp.offset for tp in committed} == {i: 10 for i in range(4)}
