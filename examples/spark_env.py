"""A SparkSession that has Spark's Kafka connector, for the examples and the compat tests.

Normally the connector comes from Maven Central: `--packages
org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>` (here `spark.jars.packages`).
Where Maven Central cannot be reached (this project's machines and CI) the same jars are taken
from local directories instead: `KBROKER_SPARK_JARS` (a `:`-separated list of directories or
jar files), by default `../shared/spark-kafka-jars` beside the checkout (the connector) and
`.deps/java/3.9.0` (kafka-clients 3.9.0 and its codecs, from scripts/fetch-java-clients.sh).
"""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONNECTOR = "spark-sql-kafka-0-10_2.13"


def local_jar_dirs() -> list[Path]:
    env = os.environ.get("KBROKER_SPARK_JARS")
    if env:
        return [Path(p) for p in env.split(":") if p]
    return [REPO.parent / "shared" / "spark-kafka-jars", REPO / ".deps" / "java" / "3.9.0"]


def local_jars() -> list[str]:
    """Every jar in the local directories; empty unless the connector itself is among them."""
    jars: list[str] = []
    for p in local_jar_dirs():
        if p.is_file() and p.suffix == ".jar":
            jars.append(str(p))
        elif p.is_dir():
            jars.extend(str(j) for j in sorted(p.glob("*.jar")))
    if not any(Path(j).name.startswith(CONNECTOR) for j in jars):
        return []
    return jars


def builder(app_name: str, *, require_local: bool = False):
    """A SparkSession.Builder for a small local Spark (2 cores) with the Kafka connector."""
    import pyspark
    from pyspark.sql import SparkSession

    # Spark's driver listens (RPC, block manager): on loopback only.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    b = (SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[2]"))
         .appName(app_name)
         .config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.default.parallelism", "2")
         .config("spark.driver.memory", os.environ.get("SPARK_DRIVER_MEMORY", "768m"))
         .config("spark.sql.streaming.stopActiveRunOnRestart", "true")
         # Small, short-lived local jobs on a small machine: the C1 JIT alone and the serial
         # GC halve their CPU time here (measured); a long-running job may prefer the defaults.
         .config("spark.driver.extraJavaOptions",
                 os.environ.get("SPARK_DRIVER_JAVA_OPTIONS",
                                "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")))
    jars = local_jars()
    if jars:
        b = b.config("spark.jars", ",".join(jars))
    elif require_local:
        raise RuntimeError(f"Spark's Kafka connector jar ({CONNECTOR}-*.jar) is not in any of "
                           f"{[str(p) for p in local_jar_dirs()]}; set KBROKER_SPARK_JARS")
    else:
        version = pyspark.__version__.split("+")[0]
        # The connector's release that matches this pyspark (4.0.x -> 4.0.x).
        b = b.config("spark.jars.packages", f"org.apache.spark:{CONNECTOR}:{version}")
    return b


def session(app_name: str, *, require_local: bool = False, log_level: str = "WARN"):
    spark = builder(app_name, require_local=require_local).getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark
