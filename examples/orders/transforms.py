"""The pipeline's Spark transformations, shared by the streaming and the batch job."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from examples.orders.model import MALFORMED, WATERMARK

ORDER_SCHEMA = StructType([
    StructField("order_id", StringType()),
    StructField("customer", StringType()),
    StructField("category", StringType()),
    StructField("amount_cents", LongType()),
    StructField("event_time_ms", LongType()),
    StructField("_corrupt_record", StringType()),  # set by from_json when the value does not fit
])
REQUIRED = ["order_id", "customer", "category", "amount_cents", "event_time_ms"]
NOT_AN_ORDER = MALFORMED["not-json"]


def parse(kafka_rows: DataFrame) -> DataFrame:
    """Kafka rows plus `o` (the parsed order) and `error` (null for a valid order)."""
    o = F.from_json(F.col("value").cast("string"), ORDER_SCHEMA,
                    {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"})
    error = F.when(F.col("o").isNull() | F.col("o._corrupt_record").isNotNull(), F.lit(NOT_AN_ORDER))
    for field in REQUIRED:
        error = error.when(F.col(f"o.{field}").isNull(), F.lit(f"missing field: {field}"))
    return kafka_rows.withColumn("o", o).withColumn("error", error)


def dead_letters(parsed: DataFrame) -> DataFrame:
    """Malformed records as they came, with where they came from and why, in headers."""
    def header(name, col):
        return F.struct(F.lit(name).alias("key"), col.cast("string").cast("binary").alias("value"))
    return parsed.where(F.col("error").isNotNull()).select(
        "key", "value",
        F.array(header("source.topic", F.col("topic")),
                header("source.partition", F.col("partition")),
                header("source.offset", F.col("offset")),
                header("source.timestamp", F.unix_millis(F.col("timestamp"))),
                header("error", F.col("error"))).alias("headers"))


def per_category_minute(parsed: DataFrame) -> DataFrame:
    """Orders and revenue per category per minute of event time, as Kafka key/value rows keyed
    by window and category (the output topic is compacted on that key)."""
    orders = (parsed.where(F.col("error").isNull())
              .select(F.timestamp_millis(F.col("o.event_time_ms")).alias("event_time"),
                      F.col("o.category").alias("category"),
                      F.col("o.amount_cents").alias("amount_cents")))
    agg = (orders.withWatermark("event_time", WATERMARK)
           .groupBy(F.window("event_time", "1 minute"), "category")
           .agg(F.count(F.lit(1)).alias("orders"), F.sum("amount_cents").alias("revenue_cents")))
    fmt = "yyyy-MM-dd'T'HH:mm:ss'Z'"  # the session's time zone is UTC (see session())
    start = F.date_format(F.col("window.start"), fmt)
    return agg.select(
        F.concat(start, F.lit("|"), F.col("category")).alias("key"),
        F.to_json(F.struct(start.alias("window_start"),
                           F.date_format(F.col("window.end"), fmt).alias("window_end"),
                           "category", "orders", "revenue_cents")).alias("value"))


def session(app_name: str):
    from examples.spark_env import builder
    spark = builder(app_name).config("spark.sql.session.timeZone", "UTC").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
