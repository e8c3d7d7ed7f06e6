"""Load and read-back for the fault tests: confluent-kafka producers record every send in a
``History`` (invoke before produce, ok/fail/info from the delivery report); ``read_all``
reads every partition back from its start to its high watermark."""

from __future__ import annotations

import subprocess
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from compat_tests.cluster_faults.checker import History

# Errors that mean the record was certainly not appended (refused before the append).
DEFINITE = {KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.INVALID_RECORD, KafkaError.MSG_SIZE_TOO_LARGE,
            KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._INVALID_ARG}


class ProducerLoad:
    """A thread producing ``name-<seq>`` round-robin over ``partitions`` until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, history: History, *,
                 name: str = "p1", acks: str = "all", idempotent: bool = True,
                 rate_per_s: float = 200.0, message_timeout_ms: int = 60000) -> None:
        self.topic, self.partitions, self.history, self.name = topic, partitions, history, name
        self.rate = rate_per_s
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": acks,
                                  "enable.idempotence": idempotent, "linger.ms": 5,
                                  "message.timeout.ms": message_timeout_ms, "retry.backoff.ms": 100,
                                  "metadata.max.age.ms": 2000})
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0
        self.fatal: list[tuple[str, str]] = []     # (value, error) of non-retriable delivery errors

    def acked(self, partition: int | None = None) -> int:
        return self.history.acked_by(self.name, partition)

    def _on_delivery(self, err, msg) -> None:
        value = msg.value().decode()
        if err is None:
            self.history.ok(value, msg.partition(), msg.offset())
            return
        if not err.retriable():
            self.fatal.append((value, err.name()))
        if err.code() in DEFINITE:
            self.history.fail(value, err.name())
        else:
            self.history.info(value, err.name())

    def _run(self) -> None:
        interval = 1.0 / self.rate
        while not self.stop_event.is_set():
            value = f"{self.name}-{self.sent}"
            part = self.sent % self.partitions
            self.history.invoke(value, self.name, part)
            while True:
                try:
                    self.producer.produce(self.topic, value=value.encode(), partition=part,
                                          on_delivery=self._on_delivery)
                    break
                except BufferError:
                    self.producer.poll(0.1)
            self.sent += 1
            self.producer.poll(0)
            time.sleep(interval)

    def start(self) -> "ProducerLoad":
        self.thread.start()
        return self

    def abandon(self) -> None:
        """Stop sending and give up every send not yet acknowledged (purged: recorded as
        indeterminate, never retried)."""
        self.stop_event.set()
        self.thread.join()
        self.producer.purge(in_queue=True, in_flight=True, blocking=False)
        self.producer.flush(10)

    def kill(self) -> None:
        """Stop sending without waiting for anything (cleanup after a failed test)."""
        self.stop_event.set()

    def stop(self, flush_s: float = 90.0) -> None:
        self.stop_event.set()
        self.thread.join()
        left = self.producer.flush(flush_s)
        assert left == 0, f"{left} sends never got a delivery report"


def read_all(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0) -> dict:
    """partition -> [(offset, value)] from the log start to the high watermark."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": "read_uncommitted"})
    out = {}
    try:
        for p in range(partitions):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            c.assign([TopicPartition(topic, p, lo)])
            rows = []
            deadline = time.monotonic() + timeout_s
            while (not rows or rows[-1][0] < hi - 1) and hi > lo:
                assert time.monotonic() < deadline, f"partition {p}: read {len(rows)} of {hi - lo}"
                for m in c.consume(500, 1.0):
                    if m.error() is None:
                        rows.append((m.offset(), m.value().decode()))
            out[p] = rows
    finally:
        c.close()
    return out


def partitions_of(bootstrap: str, topic: str, *, count: int | None = None, until=None,
                  timeout_s: float = 30.0) -> dict:
    """{partition id: PartitionMetadata} of ``topic`` as the cluster reports it, asked until it
    names the topic without error, with ``count`` partitions and ``until(partitions)`` true
    when given. A broker that cannot answer right now (just resumed or restarted) is asked
    again, never a failure by itself."""
    def ask():
        try:
            md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
        except KafkaException as e:
            print(f"list_topics({topic}): {e}")
            return None
        t = md.topics.get(topic)
        if t is None or t.error is not None or (count is not None and len(t.partitions) != count):
            return None
        return t.partitions if until is None or until(t.partitions) else None
    return wait_until(ask, timeout_s, f"metadata of {topic}")


def wait_until(cond, timeout_s: float, what: str, step: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


class JavaProducerLoad:
    """The same workload from the Java client (KafkaTool load, compat_tests/java): a JVM
    producing ``name-<seq>`` round-robin; its event lines feed the History. Same interface as
    ProducerLoad (start, acked, fatal, stop); ``fatal`` holds the callbacks' exceptions that are
    not a RetriableException."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, history: History, *,
                 name: str = "j1", version: str = "4.3.0", rate_per_s: float = 200.0, **conf) -> None:
        from compat_tests.clients.java import classpath
        self.history, self.name = history, name
        # request.timeout.ms below its 30 s default: a request in flight to a paused or cut
        # off leader holds its partition up that long (librdkafka moves on sooner)
        props = {"acks": "all", "enable.idempotence": "true", "linger.ms": "5",
                 "delivery.timeout.ms": "60000", "request.timeout.ms": "10000",
                 "retry.backoff.ms": "100", "metadata.max.age.ms": "2000", **conf}
        self.cmd = ["java", "-cp", classpath(version), "KafkaTool", "load", bootstrap, topic,
                    str(partitions), name, str(rate_per_s), *(f"{k}={v}" for k, v in props.items())]
        self.proc = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.done = threading.Event()
        self.fatal: list[tuple[str, str]] = []

    def acked(self, partition: int | None = None) -> int:
        return self.history.acked_by(self.name, partition)

    def start(self) -> "JavaProducerLoad":
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.reader.start()
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            kind, *f = line.rstrip("\n").split("\t")
            if kind == "invoke":
                self.history.invoke(f[0], self.name, int(f[1]))
            elif kind == "ok":
                self.history.ok(f[0], int(f[1]), int(f[2]))
            elif kind in ("fail", "info"):
                (self.history.fail if kind == "fail" else self.history.info)(f[0], f[1])
                if f[2:3] != ["retriable"]:
                    self.fatal.append((f[0], f[1]))
            elif kind == "done":
                self.done.set()

    def stop(self, flush_s: float = 90.0) -> None:
        self.proc.stdin.close()              # KafkaTool stops sending, flushes, prints "done"
        try:
            self.proc.wait(flush_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.reader.join(10)
        assert self.done.is_set(), "the Java producer did not flush every send before exiting"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
