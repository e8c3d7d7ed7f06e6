"""Dead-letter round trip (issue 14): a confluent-kafka consumer app that fails on some
records parks them in ``<topic>.dlq`` after its retries (kbroker.dlq helper); ``kbroker dlq
inspect`` lists them with their context; the bug is fixed; ``kbroker dlq replay --all``
republishes them; every record ends up processed exactly once, a second replay sends
nothing, and the broker's metrics count the parked records."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from compat_tests.brokers import BrokerProcess, free_port
from compat_tests.ops_util import kbroker, sample, scrape
from kbroker.dlq import DeadLetterPublisher, process_with_retries
from kbroker.dlq.headers import REPLAY_COUNT, header_map

T = 30


@pytest.fixture
def dbroker(tmp_path):
    port = free_port()
    b = BrokerProcess(tmp_path / "b", overrides={"metrics.port": str(port)}).start()
    b.metrics_port = port
    yield b
    b.stop()


class App:
    """The consumer application: processes orders, fails on 'bad' ones until fixed."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.fixed = False
        self.processed: list[tuple[bytes, bytes, int]] = []   # (key, value, replay count)
        self.attempts: dict[bytes, int] = {}
        self.headers: dict[bytes, dict] = {}
        self.dlq = DeadLetterPublisher(Producer({"bootstrap.servers": bootstrap}))
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "orders-app",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.consumer.subscribe(["orders"])

    def handle(self, msg):
        self.attempts[msg.key()] = self.attempts.get(msg.key(), 0) + 1
        if b"bad" in msg.value() and not self.fixed:
            raise ValueError(f"cannot parse order {msg.value().decode()}")
        h = header_map(msg.headers())
        self.headers[msg.key()] = h
        self.processed.append((msg.key(), msg.value(), int(h.get(REPLAY_COUNT, "0"))))

    def run_until(self, done, timeout=T):
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            msg = self.consumer.poll(0.3)
            if msg is None or msg.error():
                continue
            process_with_retries(msg, self.handle, self.dlq, max_attempts=3)
            self.consumer.commit(msg, asynchronous=False)
        assert done(), "the app did not finish in time"


def test_dlq_park_inspect_fix_replay_processed_once(dbroker):
    b = ["--bootstrap-server", dbroker.bootstrap]
    kbroker("topics", *b, "--create", "--topic", "orders", "--partitions", "2")
    kbroker("topics", *b, "--create", "--topic", "orders.dlq")
    p = Producer({"bootstrap.servers": dbroker.bootstrap})
    orders = [(b"o%d" % i, (b"bad-%d" if i % 4 == 0 else b"good-%d") % i) for i in range(20)]
    for k, v in orders:
        p.produce("orders", key=k, value=v, headers=[("trace", k)])
    assert p.flush(T) == 0
    bad = {k for k, v in orders if v.startswith(b"bad")}

    app = App(dbroker.bootstrap)
    app.run_until(lambda: len(app.processed) + app.dlq.parked == 20)
    assert {k for k, _, _ in app.processed} == {k for k, _ in orders} - bad
    assert all(app.attempts[k] == 3 for k in bad)

    # inspect: one line per dead letter with its context
    out = kbroker("dlq", "inspect", *b, "--topic", "orders.dlq").stdout.decode().splitlines()
    assert out[0].startswith("PARTITION\tOFFSET\tORIGINAL\tATTEMPTS")
    rows = [line.split("\t") for line in out[1:]]
    assert sorted(r[6].encode() for r in rows) == sorted(bad)
    for r in rows:
        assert r[2].startswith("orders-") and r[3] == "3" and r[4] == "0"
        assert r[5].startswith("ValueError: cannot parse order bad-")
    m = scrape(dbroker.metrics_port)
    assert sample(m, "kbroker_dlq_records", topic="orders", dlq_topic="orders.dlq") == len(bad)

    # fix, replay, process
    app.fixed = True
    out = kbroker("dlq", "replay", *b, "--topic", "orders.dlq", "--all").stdout.decode()
    assert out.count("replaying ") == len(bad)
    app.run_until(lambda: len(app.processed) == 20)
    keys = [k for k, _, _ in app.processed]
    assert sorted(keys) == sorted(k for k, _ in orders)          # every order processed exactly once
    replayed = [(k, v, n) for k, v, n in app.processed if k in bad]
    assert all(n == 1 for _, _, n in replayed)
    assert {(k, v) for k, v, _ in replayed} == {(k, v) for k, v in orders if k in bad}
    # the record's own headers survived; the dead-letter context was dropped
    for k in bad:
        assert app.headers[k] == {"trace": k.decode(), REPLAY_COUNT: "1"}

    # a second --all replays nothing: the position was committed
    out = kbroker("dlq", "replay", *b, "--topic", "orders.dlq", "--all").stdout.decode()
    assert "replaying" not in out
    app.run_until(lambda: True, timeout=2)
    assert len(app.processed) == 20
    app.consumer.close()
