"""The orders pipeline (examples/orders) on a three-node kbroker cluster: every topic RF=3 with
min.insync.replicas=2, Spark given all three nodes as kafka.bootstrap.servers. The broker
leading `orders` partition 0 is SIGKILLed while the streaming job runs and restarted later; the
job goes on without a restart of its own and ends with the output of the single-node test:
aggregates equal to the plain-Python reference, dead letters exactly the malformed orders."""
from __future__ import annotations

import logging
import signal

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from compat_tests.brokers import KBrokerCluster
from compat_tests.orders_pipeline import commits, dead_letter_sources, feed_orders, kill_job, spark_job
from compat_tests.spark_support import wait_for
from examples.orders.kafka_io import create_topics, latest_aggregates
from examples.orders.model import AGGREGATES_TOPIC, DEAD_LETTER_TOPIC, TOPIC

# One Spark driver plus three broker processes on a loaded 2-core machine.
pytestmark = pytest.mark.timeout(600)

TOPICS = {TOPIC: 3, DEAD_LETTER_TOPIC: 1, AGGREGATES_TOPIC: 2}
# The group coordinator's topic replicated like the rest (the cluster default is 1);
# replica.lag.time.max.ms short so the dead broker leaves the ISRs within seconds.
OVERRIDES = {"offsets.topic.replication.factor": "3", "replica.lag.time.max.ms": "5000"}


_quiet = logging.getLogger("compat.spark_cluster.librdkafka")   # connection refused to the dead node
_quiet.setLevel(logging.CRITICAL)


def partitions(bootstrap: str) -> dict:
    """(topic, partition) -> PartitionMetadata for every pipeline topic, once all are known."""
    md = AdminClient({"bootstrap.servers": bootstrap, "logger": _quiet}).list_topics(timeout=10)
    out = {(t, p.id): p for t in TOPICS if t in md.topics for p in md.topics[t].partitions.values()}
    return out if len(out) == sum(TOPICS.values()) else {}


def full_isrs(bootstrap: str) -> bool:
    parts = partitions(bootstrap)
    return bool(parts) and all(len(p.isrs) == 3 and p.leader >= 0 for p in parts.values())


def test_orders_pipeline_survives_a_broker_killed_mid_stream(tmp_path):
    cluster = KBrokerCluster(tmp_path / "cluster", 3, overrides=OVERRIDES).start()
    log_path = tmp_path / "spark.log"
    log = open(log_path, "ab")
    job = None

    def spark_log() -> str:
        return log_path.read_text(errors="replace")[-3000:]
    try:
        bs = cluster.bootstrap
        create_topics(bs, replication_factor=3, config={"min.insync.replicas": "2"})
        wait_for(lambda: full_isrs(bs), timeout=60, what="every pipeline partition on three replicas")
        orders = feed_orders(bs)

        ck = tmp_path / "checkpoint"
        job = spark_job("examples.orders.stream_job",
                        ["--bootstrap", bs, "--checkpoint", str(ck), "--interval", "1 second",
                         "--max-offsets-per-trigger", "60"], log)
        wait_for(lambda: commits(ck) >= 2 or job.poll() is not None, timeout=240,
                 what="two committed micro-batches")
        assert job.poll() is None, spark_log()

        assert latest_aggregates(bs) != orders.reference, "the job had finished before the kill"
        victim = partitions(bs)[(TOPIC, 0)].leader
        cluster.kill(victim)
        killed_at = commits(ck)
        # The job reads from the new leaders and writes (acks=all) to two in-sync replicas.
        wait_for(lambda: commits(ck) >= killed_at + 2 or job.poll() is not None, timeout=120,
                 what=f"two micro-batches committed with broker {victim} dead")
        assert job.poll() is None, spark_log()
        cluster.restart(victim)

        last = {}

        def output_complete() -> bool:
            assert job.poll() is None, spark_log()
            try:    # the output so far; a read may fail while leadership settles: try again
                last["aggregates"] = latest_aggregates(bs)
                last["dead letters"] = dead_letter_sources(bs, orders)
            except (KafkaException, RuntimeError) as e:
                last["read error"] = e
                return False
            return last["aggregates"] == orders.reference and last["dead letters"] == set(orders.malformed)
        try:
            wait_for(output_complete, timeout=240, interval=2, what="the output to equal the reference")
        except AssertionError as e:
            if "timed out" not in str(e):
                raise
            missing = {k: v for k, v in orders.reference.items() if last.get("aggregates", {}).get(k) != v}
            raise AssertionError(f"{len(missing)} aggregates differ, e.g. {list(missing.items())[:3]}; "
                                 f"dead letters seen {len(last.get('dead letters', ()))} of "
                                 f"{len(orders.malformed)}; last read error {last.get('read error')}\n"
                                 f"{spark_log()}") from None
        wait_for(lambda: full_isrs(bs), timeout=90, what=f"broker {victim} back in every ISR")

        job.send_signal(signal.SIGTERM)       # stops its queries; exit 1 if one had failed
        assert job.wait(60) == 0, spark_log()
        assert latest_aggregates(bs) == orders.reference
        assert dead_letter_sources(bs, orders) == set(orders.malformed)
    finally:
        kill_job(job)
        log.close()
        cluster.close()
