"""The batch job: recompute the aggregates for an event-time range from the log (replay).

    python -m examples.orders.batch_job --bootstrap 127.0.0.1:9092 \
        --from 2026-11-24T01:00:00Z --to 2026-11-24T01:10:00Z [--out aggregates.json]

Record timestamps are event times, so startingOffsetsByTimestamp finds where the range begins
in each partition. Late records sit in the log after newer ones, so the end offset is looked up
MAX_LATENESS_MS past the range, and rows are then filtered on event time.
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime

from examples.orders.model import MAX_LATENESS_MS, TOPIC


def parse_time(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def recompute(spark, bootstrap: str, partitions: list[int], from_ms: int, to_ms: int) -> dict[str, dict]:
    from pyspark.sql import functions as F
    from examples.orders.transforms import parse, per_category_minute
    start = {TOPIC: {str(p): from_ms for p in partitions}}
    end = {TOPIC: {str(p): to_ms + MAX_LATENESS_MS for p in partitions}}
    rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", TOPIC)
            .option("startingOffsetsByTimestamp", json.dumps(start))
            .option("startingOffsetsByTimestampStrategy", "latest")  # a partition with no match is empty
            .option("endingOffsetsByTimestamp", json.dumps(end))
            .load())
    parsed = parse(rows).where(F.col("o.event_time_ms").between(from_ms, to_ms - 1))
    return {r.key: json.loads(r.value) for r in per_category_minute(parsed).collect()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--from", dest="from_", required=True, help="ISO time, inclusive")
    ap.add_argument("--to", required=True, help="ISO time, exclusive")
    ap.add_argument("--out", help="write the aggregates here as JSON (default: stdout)")
    args = ap.parse_args(argv)
    from confluent_kafka.admin import AdminClient
    from examples.orders.transforms import session
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    partitions = sorted(admin.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions)
    spark = session("orders-batch")
    result = recompute(spark, args.bootstrap, partitions, parse_time(args.from_), parse_time(args.to))
    spark.stop()
    text = json.dumps(result, indent=1, sort_keys=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
