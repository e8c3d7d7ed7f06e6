"""Spark's built-in Kafka source and sink (spark-sql-kafka-0-10 4.0, kafka-clients 3.9.0) against a
real kbroker process: batch and streaming reads and writes, offsets options, triggers, topics and
partitions appearing mid-query, read_committed, data loss and a broker restart.

One SparkSession (local[2]) serves the whole module; every test uses its own topics.
"""
from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer
from pyspark.errors import StreamingQueryException

from compat_tests.brokers import BrokerProcess, free_port
from compat_tests.spark_support import (add_partitions, create_topic, delete_records,
                                        log_start_offset, produce, set_topic_config, start_spark,
                                        stop_spark, wait_for)

# Retention and the cleaner on short schedules, so data-loss tests need not wait minutes.
BROKER_OVERRIDES = {"log.retention.check.interval.ms": "300", "log.cleaner.backoff.ms": "200"}


@pytest.fixture(scope="module")
def spark():
    s = start_spark("kbroker-compat")
    yield s
    stop_spark(s)


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("spark-broker"), overrides=BROKER_OVERRIDES).start()
    yield b
    b.stop()


def kafka_read(spark, bs, **opts):
    r = spark.read.format("kafka").option("kafka.bootstrap.servers", bs)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def kafka_stream(spark, bs, **opts):
    r = spark.readStream.format("kafka").option("kafka.bootstrap.servers", bs)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def values(rows) -> list[str]:
    return sorted(bytes(r.value).decode() for r in rows)


def to_memory(df, name, trigger, checkpoint=None):
    w = df.writeStream.format("memory").queryName(name).outputMode("append")
    if checkpoint:
        w = w.option("checkpointLocation", str(checkpoint))
    return w.trigger(**trigger).start()


def memory_values(spark, name) -> list[str]:
    return values(spark.sql(f"SELECT value FROM {name}").collect())


def test_batch_write_and_read_columns(spark, kb):
    bs = kb.bootstrap
    create_topic(bs, "sp-batch", 3)
    rows = [(f"k{i}", f"v{i}", i % 3, [("h", f"x{i}".encode()), ("n", None)]) for i in range(60)]
    before_ms = int(time.time() * 1000)
    df = spark.createDataFrame(
        rows, "key string, value string, partition int, headers array<struct<key:string,value:binary>>")
    df.write.format("kafka").option("kafka.bootstrap.servers", bs).option("topic", "sp-batch").save()
    after_ms = int(time.time() * 1000)

    got = kafka_read(spark, bs, subscribe="sp-batch", includeHeaders="true").collect()
    assert len(got) == 60
    by_key = {bytes(r.key).decode(): r for r in got}
    for key, value, partition, headers in rows:
        r = by_key[key]
        assert bytes(r.value).decode() == value
        assert r.partition == partition and r.topic == "sp-batch"
        assert [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers] == headers
        assert r.timestampType == 0  # CreateTime, set by the producer inside Spark
        assert before_ms - 1000 <= int(r.timestamp.timestamp() * 1000) <= after_ms + 1000
    for p in range(3):  # offsets are dense per partition, in the order Spark wrote them
        offsets = sorted(r.offset for r in got if r.partition == p)
        assert offsets == list(range(20))


def test_batch_reads_producer_timestamps_and_null_keys(spark, kb):
    bs = kb.bootstrap
    create_topic(bs, "sp-ts", 1)
    t0 = int(time.time() * 1000) - 3_600_123  # within the default retention (7 days)
    produce(bs, "sp-ts", [{"value": b"a", "timestamp": t0},
                          {"value": b"b", "key": b"kb", "timestamp": t0 + 1333}])
    got = sorted(kafka_read(spark, bs, subscribe="sp-ts").collect(), key=lambda r: r.offset)
    assert [r.key for r in got] == [None, bytearray(b"kb")]
    assert [int(r.timestamp.timestamp() * 1000) for r in got] == [t0, t0 + 1333]


def test_batch_starting_and_ending_offsets(spark, kb):
    bs = kb.bootstrap
    create_topic(bs, "sp-off", 2)
    produce(bs, "sp-off", [{"value": f"p{i % 2}-{i // 2}".encode(), "partition": i % 2}
                           for i in range(20)])
    earliest = kafka_read(spark, bs, subscribe="sp-off", startingOffsets="earliest",
                          endingOffsets="latest").collect()
    assert len(earliest) == 20
    start = json.dumps({"sp-off": {"0": 3, "1": -2}})  # -2 = earliest
    end = json.dumps({"sp-off": {"0": 7, "1": -1}})    # -1 = latest
    got = kafka_read(spark, bs, subscribe="sp-off", startingOffsets=start,
                     endingOffsets=end).collect()
    assert values(got) == sorted([f"p0-{i}" for i in range(3, 7)] + [f"p1-{i}" for i in range(10)])
    # assign= with per-partition offsets reads only the partitions named.
    got = kafka_read(spark, bs, assign=json.dumps({"sp-off": [1]}),
                     startingOffsets=json.dumps({"sp-off": {"1": 8}})).collect()
    assert values(got) == ["p1-8", "p1-9"]


def test_batch_offsets_by_timestamp(spark, kb):
    bs = kb.bootstrap
    create_topic(bs, "sp-bytime", 2)
    base = int(time.time() * 1000) - 3_600_000  # an hour ago: inside retention
    produce(bs, "sp-bytime", [{"value": f"{p}-{i}".encode(), "partition": p,
                               "timestamp": base + i * 1000} for p in range(2) for i in range(10)])
    start = json.dumps({"sp-bytime": {"0": base + 2500, "1": base + 5000}})
    end = json.dumps({"sp-bytime": {"0": base + 6000, "1": base + 60_000}})  # past the end: latest
    got = kafka_read(spark, bs, subscribe="sp-bytime", startingOffsetsByTimestamp=start,
                     endingOffsetsByTimestamp=end).collect()
    assert values(got) == sorted([f"0-{i}" for i in range(3, 6)] + [f"1-{i}" for i in range(5, 10)])
    # The global form: one timestamp for every partition.
    got = kafka_read(spark, bs, subscribe="sp-bytime", startingTimestamp=str(base + 8000)).collect()
    assert values(got) == ["0-8", "0-9", "1-8", "1-9"]


def test_min_partitions_splits_offset_ranges(spark, kb):
    bs = kb.bootstrap
    create_topic(bs, "sp-minp", 2)
    produce(bs, "sp-minp", [{"value": str(i).encode(), "partition": i % 2} for i in range(400)])
    df = kafka_read(spark, bs, subscribe="sp-minp", minPartitions="8")
    assert df.rdd.getNumPartitions() >= 8
    assert values(df.collect()) == sorted(str(i) for i in range(400))


def test_stream_available_now_with_max_offsets_per_trigger(spark, kb, tmp_path):
    bs = kb.bootstrap
    create_topic(bs, "sp-avail", 2)
    produce(bs, "sp-avail", [{"value": str(i).encode(), "partition": i % 2} for i in range(100)])
    q = to_memory(kafka_stream(spark, bs, subscribe="sp-avail", startingOffsets="earliest",
                               maxOffsetsPerTrigger="30"),
                  "sp_avail", {"availableNow": True}, tmp_path / "ckpt")
    assert q.awaitTermination(120)
    assert q.exception() is None
    batches = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(batches) == 100 and len(batches) >= 4 and max(batches) <= 30, batches
    assert memory_values(spark, "sp_avail") == sorted(str(i) for i in range(100))


def test_stream_processing_time_trigger_latest_then_new_data(spark, kb):
    bs = kb.bootstrap
    create_topic(bs, "sp-ptime", 2)
    produce(bs, "sp-ptime", [{"value": b"old"}])
    q = to_memory(kafka_stream(spark, bs, subscribe="sp-ptime", startingOffsets="latest"),
                  "sp_ptime", {"processingTime": "1 second"})
    try:
        wait_for(lambda: q.lastProgress is not None, what="first micro-batch")
        for wave in range(3):  # new data while the query runs, picked up by later triggers
            produce(bs, "sp-ptime", [{"value": f"w{wave}-{i}".encode()} for i in range(5)])
            want = sorted(f"w{w}-{i}" for w in range(wave + 1) for i in range(5))
            wait_for(lambda: memory_values(spark, "sp_ptime") == want, what=f"wave {wave}")
        assert q.exception() is None
    finally:
        q.stop()
    assert "old" not in memory_values(spark, "sp_ptime")


def test_kafka_to_kafka_stream(spark, kb, tmp_path):
    from pyspark.sql import functions as F
    bs = kb.bootstrap
    create_topic(bs, "sp-k2k-in", 3)
    create_topic(bs, "sp-k2k-out", 2)
    produce(bs, "sp-k2k-in", [{"key": f"c{i % 7}".encode(), "value": str(i).encode()}
                              for i in range(90)])
    src = kafka_stream(spark, bs, subscribe="sp-k2k-in", startingOffsets="earliest",
                       includeHeaders="true")
    out = src.select(
        F.col("key"),
        F.concat(F.lit("x"), F.col("value").cast("string")).alias("value"),
        F.array(F.struct(F.lit("src-offset").alias("key"),
                         F.col("offset").cast("string").cast("binary").alias("value"))).alias("headers"))
    q = (out.writeStream.format("kafka").option("kafka.bootstrap.servers", bs)
         .option("topic", "sp-k2k-out").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120) and q.exception() is None
    got = kafka_read(spark, bs, subscribe="sp-k2k-out", includeHeaders="true").collect()
    assert values(got) == sorted(f"x{i}" for i in range(90))
    # The sink's default partitioner hashes the key: one key, one output partition.
    parts: dict[bytes, set[int]] = {}
    for r in got:
        parts.setdefault(bytes(r.key), set()).add(r.partition)
        assert r.headers[0].key == "src-offset"
    assert all(len(p) == 1 for p in parts.values())


def test_subscribe_pattern_picks_up_new_topic_and_new_partitions(spark, kb):
    bs = kb.bootstrap
    create_topic(bs, "sp-pat-a", 1)
    produce(bs, "sp-pat-a", [{"value": b"a0"}])
    q = to_memory(kafka_stream(spark, bs, subscribePattern="sp-pat-.*", startingOffsets="earliest",
                               **{"kafka.metadata.max.age.ms": "1000"}),
                  "sp_pat", {"processingTime": "1 second"})
    try:
        wait_for(lambda: memory_values(spark, "sp_pat") == ["a0"], what="first topic")
        create_topic(bs, "sp-pat-b", 2)  # a topic created while the query runs
        produce(bs, "sp-pat-b", [{"value": f"b{p}".encode(), "partition": p} for p in range(2)])
        wait_for(lambda: memory_values(spark, "sp_pat") == ["a0", "b0", "b1"], what="new topic")
        add_partitions(bs, "sp-pat-a", 3)  # partitions added while it runs
        produce(bs, "sp-pat-a", [{"value": f"a-new{p}".encode(), "partition": p} for p in (1, 2)])
        wait_for(lambda: memory_values(spark, "sp_pat") == ["a-new1", "a-new2", "a0", "b0", "b1"],
                 what="new partitions")
        assert q.exception() is None
    finally:
        q.stop()


def test_subscribe_picks_up_partitions_added_mid_query(spark, kb):
    bs = kb.bootstrap
    create_topic(bs, "sp-grow", 1)
    produce(bs, "sp-grow", [{"value": b"p0"}])
    q = to_memory(kafka_stream(spark, bs, subscribe="sp-grow", startingOffsets="earliest"),
                  "sp_grow", {"processingTime": "1 second"})
    try:
        wait_for(lambda: memory_values(spark, "sp_grow") == ["p0"], what="first partition")
        add_partitions(bs, "sp-grow", 4)
        produce(bs, "sp-grow", [{"value": f"p{p}".encode(), "partition": p} for p in (1, 2, 3)])
        # New partitions are read from their start, so nothing produced to them is missed.
        wait_for(lambda: memory_values(spark, "sp_grow") == ["p0", "p1", "p2", "p3"],
                 what="records in the added partitions")
        assert q.exception() is None
    finally:
        q.stop()


def txn_data(bs, topic):
    """committed c0..c4, aborted a0..a4, committed c5..c9 and an open-then-aborted tail."""
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"txn-{topic}", "linger.ms": 5})
    p.init_transactions(30)
    for label, n, commit in (("c", range(5), True), ("a", range(5), False),
                             ("c", range(5, 10), True)):
        p.begin_transaction()
        for i in n:
            p.produce(topic, value=f"{label}{i}".encode(), partition=i % 2)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    plain = Producer({"bootstrap.servers": bs})
    plain.produce(topic, value=b"plain", partition=0)
    assert plain.flush(30) == 0


def test_read_committed_hides_aborted_transactions(spark, kb, tmp_path):
    bs = kb.bootstrap
    create_topic(bs, "sp-txn", 2)
    txn_data(bs, "sp-txn")
    committed = sorted([f"c{i}" for i in range(10)] + ["plain"])
    got = kafka_read(spark, bs, subscribe="sp-txn", **{"kafka.isolation.level": "read_committed"})
    assert values(got.collect()) == committed
    # Offsets have gaps (markers, aborted records): the batch read must not call that data loss.
    offsets = sorted(r.offset for r in got.collect() if r.partition == 0)
    assert offsets[-1] > len(offsets) - 1
    # read_uncommitted shows the aborted ones: the check above can fail.
    assert len(kafka_read(spark, bs, subscribe="sp-txn").collect()) == len(committed) + 5
    q = to_memory(kafka_stream(spark, bs, subscribe="sp-txn", startingOffsets="earliest",
                               maxOffsetsPerTrigger="4",
                               **{"kafka.isolation.level": "read_committed"}),
                  "sp_txn", {"availableNow": True}, tmp_path / "ck")
    assert q.awaitTermination(120) and q.exception() is None
    assert memory_values(spark, "sp_txn") == committed


def _lose_data(bs, topic, how):
    """Remove offsets 20..29 of partition 0 behind the query's back (retention may take 30..39 too)."""
    if how == "delete-records":
        delete_records(bs, topic, {0: 30})
    else:  # retention: a short retention.ms drops the closed segments holding them
        set_topic_config(bs, topic, "retention.ms", "1000")
        wait_for(lambda: log_start_offset(bs, topic, 0) >= 30,
                 what="retention to delete old segments")
        set_topic_config(bs, topic, "retention.ms", str(7 * 24 * 3600 * 1000))


@pytest.mark.parametrize("how", ["delete-records", "retention"])
@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_fail_on_data_loss(spark, kb, tmp_path, how, fail_on_data_loss):
    bs = kb.bootstrap
    topic = f"sp-loss-{how}-{str(fail_on_data_loss).lower()}"
    # Small segments that roll on time, so retention can drop everything but the newest record.
    create_topic(bs, topic, 1, {"segment.ms": "200"} if how == "retention" else {})

    out = tmp_path / "out"

    def run():  # a file sink: unlike the memory sink it restarts from its checkpoint
        q = (kafka_stream(spark, bs, subscribe=topic, startingOffsets="earliest",
                          failOnDataLoss=str(fail_on_data_loss).lower())
             .selectExpr("CAST(value AS STRING) AS value")
             .writeStream.format("json").option("path", str(out))
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
        try:
            q.awaitTermination(120)
        except StreamingQueryException:
            pass  # checked below through q.exception()
        return q

    def got():
        return sorted(r.value for r in spark.read.json(str(out)).collect())

    produce(bs, topic, [{"value": f"{i:02d}".encode()} for i in range(20)])
    q = run()
    assert q.exception() is None and got() == [f"{i:02d}" for i in range(20)]
    produce(bs, topic, [{"value": f"{i:02d}".encode()} for i in range(20, 30)])
    if how == "retention":
        time.sleep(0.5)  # let the segment holding 20..29 age and roll before the next append
    produce(bs, topic, [{"value": f"{i:02d}".encode()} for i in range(30, 40)])
    _lose_data(bs, topic, how)
    produce(bs, topic, [{"value": f"{i:02d}".encode()} for i in range(40, 50)])
    q = run()  # restarts from the checkpoint: next offset 20, now gone
    if fail_on_data_loss:
        assert q.exception() is not None
        msg = str(q.exception())
        assert "data" in msg.lower() and ("lost" in msg.lower() or "loss" in msg.lower()), msg[:2000]
        assert got() == [f"{i:02d}" for i in range(20)]
    else:
        assert q.exception() is None
        kept = [f"{i:02d}" for i in range(20)]
        new = sorted(set(got()) - set(kept))
        assert not any(v < "30" for v in new), new  # nothing from the removed range
        assert [v for v in new if v >= "40"] == [f"{i}" for i in range(40, 50)], new
        if how == "delete-records":  # retention may have taken 30..39 as well
            assert new[:10] == [f"{i}" for i in range(30, 40)], new


def test_query_survives_broker_restart(spark, tmp_path):
    port = free_port()
    b = BrokerProcess(tmp_path / "b", port=port).start()
    q = None
    try:
        bs = b.bootstrap
        create_topic(bs, "sp-restart", 2)
        produce(bs, "sp-restart", [{"value": f"before{i}".encode(), "partition": i % 2}
                                   for i in range(10)])
        q = to_memory(kafka_stream(spark, bs, subscribe="sp-restart", startingOffsets="earliest"),
                      "sp_restart", {"processingTime": "1 second"}, tmp_path / "ck")
        wait_for(lambda: len(memory_values(spark, "sp_restart")) == 10, what="data before restart")
        b.stop()
        time.sleep(2)  # a few triggers fire while the broker is away
        b.start()
        produce(bs, "sp-restart", [{"value": f"after{i}".encode(), "partition": i % 2}
                                   for i in range(10)])
        want = sorted([f"before{i}" for i in range(10)] + [f"after{i}" for i in range(10)])
        wait_for(lambda: memory_values(spark, "sp_restart") == want, timeout=120,
                 what="data after restart")
        assert q.isActive and q.exception() is None
    finally:
        if q is not None:
            q.stop()
        b.stop()
