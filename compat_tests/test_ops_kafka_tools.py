"""Apache Kafka's own command-line tools against kbroker (issue 14): operators keep their
``kafka-*.sh``. Each JVM start is seconds here, so the tools run in a few parallel waves,
each invocation doing a batch of work, and every output is checked against what kbroker and
a stock client (confluent-kafka) know.

The broker runs Kafka's StandardAuthorizer with the anonymous PLAINTEXT user as super user, so
kafka-acls has an authorizer to talk to and every other tool is allowed.

kafka-leader-election and kafka-reassign-partitions need a 3-node cluster: compat_tests/cluster_faults/
test_reassignment.py."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from compat_tests.brokers import REPO, BrokerProcess
from compat_tests.ops_util import kbroker

T = 60


def _kafka_home() -> Path:
    for base in (REPO.parent / "shared", REPO.parent.parent / "shared"):
        if (base / "reference-kafka" / "bin" / "kafka-topics.sh").exists():
            return base / "reference-kafka"
    raise AssertionError("../shared/reference-kafka (Apache Kafka 4.0's bin/ tools) not found beside the repository")


KAFKA = _kafka_home()


def _wave(cmds: dict[str, list[str]], tmp: Path, inputs: dict[str, bytes] | None = None) -> dict[str, str]:
    """Run Kafka tools in parallel; name -> stdout. Fails on a non-zero exit."""
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m", "LOG_DIR": str(tmp / "kafka-tool-logs"),
           "KAFKA_OPTS": "-XX:TieredStopAtLevel=1 -Xshare:auto"}
    procs = {}
    for name, cmd in cmds.items():
        procs[name] = subprocess.Popen([str(KAFKA / "bin" / cmd[0]), *cmd[1:]], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp)
    out = {}
    for name, p in procs.items():
        try:
            so, se = p.communicate((inputs or {}).get(name), timeout=180)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
            raise AssertionError(f"{name} timed out:\n{so.decode()}\n{se.decode()}")
        assert p.returncode == 0, f"{name} exited {p.returncode}:\n{so.decode()}\n{se.decode()}"
        out[name] = so.decode()
    return out


@pytest.fixture(scope="module")
def abroker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("kafka-tools"), overrides={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS"}).start()
    yield b
    b.stop()


def test_kafka_tools_against_kbroker(abroker, tmp_path):
    shared_broker = abroker
    bs = shared_broker.bootstrap
    b = ["--bootstrap-server", bs]
    admin = AdminClient({"bootstrap.servers": bs})
    for t, n in (("kperf", 2), ("kver", 2)):
        admin.create_topics([NewTopic(t, n, 1)])[t].result(T)
    # a transaction, so kafka-transactions has something to list
    tp = Producer({"bootstrap.servers": bs, "transactional.id": "kt-txn"})
    tp.init_transactions(T)
    tp.begin_transaction()
    tp.produce("kver", value=b"t")
    tp.commit_transaction(T)
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"partitions": [{"topic": "kt", "partition": 0, "offset": 2}], "version": 1}))
    lines = "".join(f"h{i}:x{i}\tkey{i}\tvalue{i}\n" for i in range(12)).encode()

    # wave 1: create, then write through Kafka's producers, alter configs, read features
    w = _wave({"create": ["kafka-topics.sh", *b, "--create", "--topic", "kt", "--partitions", "3",
                          "--replication-factor", "1", "--config", "retention.ms=86400000"]}, tmp_path)
    assert w["create"].strip() == "Created topic kt."
    w = _wave({
        "producer": ["kafka-console-producer.sh", *b, "--topic", "kt", "--property", "parse.key=true",
                     "--property", "parse.headers=true"],
        "perf": ["kafka-producer-perf-test.sh", "--topic", "kperf", "--num-records", "5000", "--record-size", "100",
                 "--throughput", "-1", "--producer-props", f"bootstrap.servers={bs}", "acks=all"],
        "verifiable": ["kafka-verifiable-producer.sh", *b, "--topic", "kver", "--max-messages", "200"],
        "alter": ["kafka-configs.sh", *b, "--alter", "--entity-type", "topics", "--entity-name", "kt",
                  "--add-config", "segment.bytes=1048576,cleanup.policy=[delete]"],
        "features": ["kafka-features.sh", *b, "describe"],
        "txns": ["kafka-transactions.sh", *b, "list"],
        "quorum": ["kafka-metadata-quorum.sh", *b, "describe", "--status"],
        "acl-add": ["kafka-acls.sh", *b, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                    "--operation", "Write", "--topic", "kt"],
    }, tmp_path, {"producer": lines})
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in w["acl-add"]
    assert re.search(r"^LeaderId:\s+1$", w["quorum"], re.M) and re.search(r"^CurrentVoters:\s+\[.*\"id\": ?1\b", w["quorum"], re.M), w["quorum"]
    assert re.search(r"^5000 records sent, .* ms 99\.9th\.$", w["perf"], re.M)
    tool_data = [json.loads(x) for x in w["verifiable"].splitlines() if '"tool_data"' in x][-1]
    assert tool_data["sent"] == tool_data["acked"] == 200
    assert w["alter"].strip() == "Completed updating config for topic kt."
    # (kbroker advertises metadata.version min level 1, which Kafka 4.0's tool prints as "UNKNOWN 1")
    assert re.search(r"Feature: metadata\.version\tSupportedMinVersion: [^\t]+\tSupportedMaxVersion: [\d.]+-IV\d\t"
                     r"FinalizedVersionLevel: [\d.]+-IV\d\t", w["features"]), w["features"]
    assert re.search(r"^kt-txn\s+1\s+\d+\s+CompleteCommit", w["txns"], re.M), w["txns"]
    res = ConfigResource(ResourceType.TOPIC, "kt")
    assert admin.describe_configs([res])[res].result(T)["segment.bytes"].value == "1048576"
    # Kafka's producer put keys where kbroker's murmur2 says (the Java partitioner)
    from kbroker.tools.partitioner import partition_for_key
    c = Consumer({"bootstrap.servers": bs, "group.id": "kt-check", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition("kt", p, 0) for p in range(3)])
    got = []
    deadline = time.monotonic() + T
    while len(got) < 12 and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            got.append(m)
    assert len(got) == 12, "records written by kafka-console-producer are missing"
    c.close()
    for m in got:
        i = int(m.key()[3:])
        assert m.value() == b"value%d" % i and m.headers() == [(f"h{i}", b"x%d" % i)]
        assert m.partition() == partition_for_key(m.key(), 3)
    ends = {p: Consumer({"bootstrap.servers": bs, "group.id": "x"}).get_watermark_offsets(
        TopicPartition("kt", p), timeout=T)[1] for p in range(3)}

    # wave 2: read it all back with Kafka's consumers and describe tools
    seg = Path(shared_broker.data_dir) / "logs" / "kt-0" / "00000000000000000000.log"
    meta = Path(shared_broker.data_dir) / "logs" / "__cluster_metadata-0" / "00000000000000000000.log"
    # a producer-state snapshot and a transaction index as kbroker writes them
    from kbroker.txn.producer_snapshot import SnapshotEntry, write_snapshot_file
    from kbroker.txn.txn_index import AbortedTxn, TransactionIndex
    snap = tmp_path / "00000000000000000042.snapshot"
    write_snapshot_file(snap, [SnapshotEntry(7, 1, 9, 41, 4, 1700000000000, 3, -1),
                               SnapshotEntry(8, 0, 2, 30, 2, 1700000000001, -1, 25)])
    txn = TransactionIndex(str(tmp_path / "00000000000000000000.txnindex"), 0)
    txn.append(AbortedTxn(7, 10, 20, 21))
    txn.flush()
    txn.close()
    dump_files = f"{seg},{snap},{tmp_path / '00000000000000000000.txnindex'}"
    w = _wave({
        "describe": ["kafka-topics.sh", *b, "--describe", "--topic", "kt"],
        "configs": ["kafka-configs.sh", *b, "--describe", "--entity-type", "topics", "--entity-name", "kt"],
        "consumer": ["kafka-console-consumer.sh", *b, "--topic", "kt", "--group", "kt-group", "--from-beginning",
                     "--max-messages", "12", "--property", "print.key=true", "--property", "print.headers=true"],
        "cperf": ["kafka-consumer-perf-test.sh", *b, "--topic", "kperf", "--messages", "5000", "--timeout", "60000"],
        "vconsumer": ["kafka-verifiable-consumer.sh", *b, "--topic", "kver", "--group-id", "kver-g",
                      "--max-messages", "200"],
        "offsets": ["kafka-get-offsets.sh", *b, "--topic", "kt"],
        "logdirs": ["kafka-log-dirs.sh", *b, "--describe", "--broker-list", "1", "--topic-list", "kt"],
        "dump": ["kafka-dump-log.sh", "--files", dump_files, "--print-data-log"],
        "metadata": ["kafka-dump-log.sh", "--cluster-metadata-decoder", "--files", str(meta)],
        "acl-list": ["kafka-acls.sh", *b, "--list", "--topic", "kt"],
    }, tmp_path)
    acls = sorted(line.strip() for line in w["acl-list"].splitlines() if line.strip().startswith("(principal="))
    assert acls == ["(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
                    "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)"]
    assert w["describe"] == kbroker("topics", *b, "--describe", "--topic", "kt").stdout.decode()
    assert w["configs"] == kbroker("configs", *b, "--describe", "--topic", "kt").stdout.decode()
    assert "  segment.bytes=1048576 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.bytes=1048576" in w["configs"]
    assert sorted(w["consumer"].splitlines()) == sorted(f"h{i}:x{i}\tkey{i}\tvalue{i}" for i in range(12))
    vals = [x.strip() for x in w["cperf"].strip().splitlines()[-1].split(",")]
    assert vals[4] == "5000"
    events = [json.loads(x) for x in w["vconsumer"].splitlines() if x.startswith("{")]
    assert sum(e["count"] for e in events if e["name"] == "records_consumed") >= 200
    assert sorted(w["offsets"].split()) == sorted(f"kt:{p}:{ends[p]}" for p in range(3))
    info = json.loads(w["logdirs"].strip().splitlines()[-1])
    parts = {p["partition"]: p["size"] for d in info["brokers"][0]["logDirs"] for p in d["partitions"]}
    assert parts["kt-0"] == seg.stat().st_size
    assert w["dump"] == kbroker("dump-log", "--files", dump_files, "--print-data-log").stdout.decode()
    assert "producerId: 8 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong[25]" in w["dump"]
    # Kafka decodes kbroker's metadata log (field-for-field equality needs per-version field
    # lists the codec does not keep; the records and their types agree)
    ours = kbroker("dump-log", "--cluster-metadata-decoder", "--files", str(meta)).stdout.decode()
    kinds = lambda text: re.findall(r'payload: \{"type":"(\w+)","version":(\d+)', text)  # noqa: E731
    assert kinds(w["metadata"]) == kinds(ours) and ("TOPIC_RECORD", "0") in kinds(ours)
    assert re.search(r'"type":"TOPIC_RECORD","version":0,"data":\{"name":"kt"', w["metadata"])

    # wave 3: the group the console consumer left, and deleting records
    w = _wave({
        "groups": ["kafka-consumer-groups.sh", *b, "--describe", "--group", "kt-group"],
        "delete": ["kafka-delete-records.sh", *b, "--offset-json-file", str(plan)],
    }, tmp_path)
    rows = [r.split() for r in w["groups"].splitlines() if r.startswith("kt-group")]
    assert sorted((r[1], r[2], r[3], r[4], r[5]) for r in rows) == \
        sorted(("kt", str(p), str(ends[p]), str(ends[p]), "0") for p in range(3))
    if ends[0] >= 2:
        assert "partition: kt-0\tlow_watermark: 2" in w["delete"]
    else:
        assert "partition: kt-0\terror:" in w["delete"]
