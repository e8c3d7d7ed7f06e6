"""The streaming job: orders -> dead letters + aggregates per category per minute.

    python -m examples.orders.stream_job --bootstrap 127.0.0.1:9092 --checkpoint /tmp/orders-ck

Two queries read `orders` with Spark's Kafka source: one writes malformed records to the
dead-letter topic, one writes windowed aggregates (event time, watermark) in update mode to the
compacted output topic. Both are checkpointed: killed and restarted with the same
--checkpoint, the job resumes where its last committed micro-batch ended. The Kafka sink is
at-least-once, so a restart may write a row again; keys make that harmless on the compacted
topic, and dead letters carry their source offset so duplicates can be recognised.
"""
from __future__ import annotations

import argparse
import signal
import sys

from examples.orders.model import AGGREGATES_TOPIC, DEAD_LETTER_TOPIC, TOPIC
from examples.orders.transforms import dead_letters, parse, per_category_minute, session


def start_queries(spark, bootstrap: str, checkpoint: str, trigger: dict,
                  max_offsets_per_trigger: int | None = None):
    source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", TOPIC).option("startingOffsets", "earliest"))
    if max_offsets_per_trigger:
        source = source.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    parsed = parse(source.load())

    def to_kafka(df, topic, name, mode):
        return (df.writeStream.format("kafka").queryName(name)
                .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
                .option("checkpointLocation", f"{checkpoint}/{name}")
                .outputMode(mode).trigger(**trigger).start())

    return [to_kafka(dead_letters(parsed), DEAD_LETTER_TOPIC, "dead_letters", "append"),
            to_kafka(per_category_minute(parsed), AGGREGATES_TOPIC, "aggregates", "update")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--available-now", action="store_true",
                    help="process what is in the topic now, then stop (default: run until SIGTERM)")
    ap.add_argument("--interval", default="2 seconds", help="processing-time trigger interval")
    ap.add_argument("--max-offsets-per-trigger", type=int)
    args = ap.parse_args(argv)

    trigger = {"availableNow": True} if args.available_now else {"processingTime": args.interval}
    spark = session("orders-stream")
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    queries = start_queries(spark, args.bootstrap, args.checkpoint, trigger,
                            args.max_offsets_per_trigger)
    print("stream job started", flush=True)
    while not stopping and any(q.isActive for q in queries):
        spark.streams.awaitAnyTermination(1)
        spark.streams.resetTerminated()
    for q in queries:
        q.stop()
    failed = [q.exception() for q in queries if q.exception() is not None]
    for e in failed:
        print(f"query failed: {e}", file=sys.stderr)
    spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
