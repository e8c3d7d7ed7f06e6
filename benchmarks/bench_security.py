"""Security overhead: produce and consume 1 KiB records over SASL_SSL (SCRAM-SHA-512, TLS)
beside PLAINTEXT, against the same kbroker process in the same run, with confluent-kafka.
Rounds alternate between the two listeners so machine noise hits both alike; reports
records/s and MB/s per listener and the SASL_SSL/PLAINTEXT ratio.

    python benchmarks/bench_security.py [--records 100000] [--rounds 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,  # noqa: E402
                                   UserScramCredentialUpsertion)

from compat_tests.brokers import BrokerProcess, free_port  # noqa: E402
from compat_tests.security_certs import make_certs  # noqa: E402

VALUE = b"x" * 1024


def produce(conf, topic, n) -> float:
    p = Producer({**conf, "linger.ms": 5, "batch.size": 1 << 20, "acks": "all"})
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return time.perf_counter() - t0


def consume(conf, topic, n) -> float:
    c = Consumer({**conf, "group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 50 << 20})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    t0 = time.perf_counter()
    while got < n:
        msgs = c.consume(10000, timeout=10)
        if not msgs:
            raise RuntimeError(f"consumer stalled at {got}/{n}")
        got += len(msgs)
    dt = time.perf_counter() - t0
    c.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        certs = make_certs(d / "certs")
        secure = free_port()
        b = BrokerProcess(d / "broker")
        b.overrides.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_SSL://127.0.0.1:{secure},CONTROLLER://127.0.0.1:{free_port()}",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512"})
        b.start()
        try:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                    "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bench-pw")]).values():
                f.result(30)
            confs = {
                "PLAINTEXT": {"bootstrap.servers": b.bootstrap},
                "SASL_SSL": {"bootstrap.servers": f"127.0.0.1:{secure}", "security.protocol": "SASL_SSL",
                             "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bench", "sasl.password": "bench-pw",
                             "ssl.ca.location": str(certs.ca)},
            }
            times = {(k, op): [] for k in confs for op in ("produce", "consume")}
            for r in range(args.rounds):
                for name, conf in confs.items():
                    topic = f"bench-{name}-{r}"
                    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
                    times[(name, "produce")].append(produce(conf, topic, args.records))
                    times[(name, "consume")].append(consume(conf, topic, args.records))
            mb = args.records * len(VALUE) / 1e6
            print(f"kbroker, {args.records} x 1 KiB records, confluent-kafka, median of {args.rounds} rounds")
            print(f"{'listener':<11} {'op':<8} {'records/s':>10} {'MB/s':>8}")
            for (name, op), ts in times.items():
                t = statistics.median(ts)
                print(f"{name:<11} {op:<8} {args.records / t:>10.0f} {mb / t:>8.1f}")
            for op in ("produce", "consume"):
                ratio = statistics.median(times[("PLAINTEXT", op)]) / statistics.median(times[("SASL_SSL", op)])
                print(f"SASL_SSL / PLAINTEXT throughput, {op}: {ratio:.2f}")
        finally:
            b.stop()


if __name__ == "__main__":
    main()
