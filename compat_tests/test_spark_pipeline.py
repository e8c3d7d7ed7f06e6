"""The orders pipeline (examples/orders) end to end on Spark against a real kbroker process.

N generated orders in; the aggregates on the compacted output topic equal a reference computed
in plain Python from the same orders; the dead-letter topic holds exactly the malformed ones with
headers naming their source; the streaming driver (a separate process) is SIGKILLed mid-stream
and restarted from its checkpoint, and still ends with the same output; the batch job replays
an event-time range from the log by timestamp and gets the same numbers.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from confluent_kafka import Producer

from compat_tests.brokers import REPO, BrokerProcess
from compat_tests.orders_pipeline import commits, dead_letter_sources, feed_orders, kill_job, spark_job
from compat_tests.spark_support import wait_for
from examples.orders.kafka_io import create_topics, latest_aggregates, read_topic
from examples.orders.model import AGGREGATES_TOPIC, WINDOW_MS, minute, reference_aggregates
from examples.spark_env import local_jar_dirs, local_jars

# Each test starts two or three Spark drivers (a JVM each): minutes on a loaded 2-core machine.
pytestmark = pytest.mark.timeout(900)


def test_orders_pipeline_killed_mid_stream_restarts_to_same_output(tmp_path):
    broker = BrokerProcess(tmp_path / "broker", overrides={"log.cleaner.backoff.ms": "200"}).start()
    log = open(tmp_path / "spark.log", "ab")
    job = None
    try:
        bs = broker.bootstrap
        # Output segments roll every second so the cleaner gets to compact them during the test.
        create_topics(bs, aggregates_config={"segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01"})
        orders = feed_orders(bs)
        events, start_ms, reference = orders.events, orders.start_ms, orders.reference

        ck = tmp_path / "checkpoint"
        job = spark_job("examples.orders.stream_job",
                        ["--bootstrap", bs, "--checkpoint", str(ck), "--interval", "1 second",
                         "--max-offsets-per-trigger", "60"], log)
        # Mid-stream: a couple of micro-batches committed, most of the topic still unread.
        wait_for(lambda: commits(ck) >= 2 or job.poll() is not None, timeout=240,
                 what="two committed micro-batches")
        assert job.poll() is None, (tmp_path / "spark.log").read_text()[-3000:]
        kill_job(job)
        partial = latest_aggregates(bs)
        assert partial != reference, "the job had finished before it was killed"

        job = spark_job("examples.orders.stream_job",
                        ["--bootstrap", bs, "--checkpoint", str(ck), "--available-now"], log)
        assert job.wait(300) == 0, (tmp_path / "spark.log").read_text()[-3000:]
        assert latest_aggregates(bs) == reference

        # Dead letters: every malformed order, none of the good ones.
        assert dead_letter_sources(bs, orders) == set(orders.malformed)

        # Replay: the batch job recomputes two whole minutes from the log by timestamp.
        from_ms = start_ms - start_ms % WINDOW_MS + 2 * WINDOW_MS
        to_ms = from_ms + 2 * WINDOW_MS
        out = tmp_path / "batch.json"
        job = spark_job("examples.orders.batch_job",
                        ["--bootstrap", bs, "--from", minute(from_ms), "--to", minute(to_ms),
                         "--out", str(out)], log)
        assert job.wait(300) == 0, (tmp_path / "spark.log").read_text()[-3000:]
        replayed = json.loads(out.read_text())
        assert replayed == reference_aggregates(events, from_ms, to_ms)
        assert len(replayed) >= 2 * 5

        # Compaction: micro-batches in update mode and the restart rewrote rows; the cleaner
        # leaves one value per window and category. (The active segment is never cleaned, so
        # a tombstone for a key of no interest rolls each partition's last segment first.)
        assert len(read_topic(bs, AGGREGATES_TOPIC)) > len(reference)
        roller = Producer({"bootstrap.servers": bs})
        for p in range(2):
            roller.produce(AGGREGATES_TOPIC, key=b"~roll", value=None, partition=p)
        assert roller.flush(30) == 0

        def one_value_per_key():
            rows = [m for m in read_topic(bs, AGGREGATES_TOPIC) if m.value() is not None]
            return len(rows) == len({m.key() for m in rows})
        wait_for(one_value_per_key, timeout=120, interval=1, what="the cleaner to compact the output")
        assert latest_aggregates(bs) == reference
    finally:
        kill_job(job)
        log.close()
        broker.stop()


def test_orders_command_runs_everything_and_stops_cleanly(tmp_path):
    """`python -m examples.orders`: its own kbroker, the streaming job fed live, the batch
    replay, each checked against the reference by the command (exit status 0), then stopped."""
    assert local_jars(), f"Spark's Kafka connector jars not found in {local_jar_dirs()}"
    run = subprocess.run([sys.executable, "-m", "examples.orders", "--count", "300", "--rate", "600",
                          "--span-minutes", "2"], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=600, start_new_session=True)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "equal the reference" in out and "dead letters" in out
    assert "equal to the reference" in out  # the batch replay
    # The command's own report ends with the broker stopped. librdkafka may log to stderr as
    # its handles are destroyed at interpreter exit (a purged background event), after that.
    assert run.stdout.rstrip().endswith("kbroker stopped"), out[-1000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
