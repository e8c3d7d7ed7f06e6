"""Transactions with the Java client (kafka-clients 4.3.0 and 3.9.0, through KafkaTool):

* consume-transform-produce (initTransactions / beginTransaction / send /
  sendOffsetsToTransaction(offsets, consumer.groupMetadata()) / commitTransaction) with a
  read_committed group consumer, every third transaction aborted and redone from the group's
  committed offsets: downstream read_committed sees every input exactly once and nothing of an
  aborted transaction; read_uncommitted sees the aborted attempts too;
* fencing: a second producer with the same transactional.id fences the first, whose commit
  fails with ProducerFencedException; its open transaction is aborted.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from compat_tests.brokers import BrokerProcess
from compat_tests.clients import Rec
from compat_tests.clients import java as java_client
from compat_tests.clients.java import JavaDriver
from compat_tests.test_transactions import FAST_TIMERS

pytestmark = pytest.mark.timeout(90)

VERSIONS = ["4.3.0", "3.9.0"]
N = 600


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("txn-java"), overrides=FAST_TIMERS).start()
    yield b
    b.stop()


def driver(broker, version) -> JavaDriver:
    if not java_client.available(version):
        pytest.fail("Java client jars missing: run scripts/fetch-java-clients.sh")
    return JavaDriver(broker.bootstrap, version)


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"


@pytest.mark.parametrize("version", VERSIONS)
def test_java_consume_transform_produce_exactly_once(txn_broker, version):
    j = driver(txn_broker, version)
    src, dst = unique("jtxn-in"), unique("jtxn-out")
    j.create_topic(src, 2)
    j.create_topic(dst, 2)
    values = [f"v{i}".encode() for i in range(N)]
    # keyed so both partitions get records; the copy keeps each record's partition
    j.produce(src, [Rec(key=f"k{i}".encode(), value=v, timestamp=1_700_000_000_000 + i)
                    for i, v in enumerate(values)])

    out = j.txn_copy(src, dst, unique("jtxn-group"), unique("jtxn-id"), N, abort_every=3,
                     **{"consumer.max.poll.records": "40"})
    assert out["done"] == N, out
    aborted = out["aborted"]
    committed = out["committed"]
    assert aborted, out                           # some transactions were aborted and redone
    assert sum(n for _, n in committed) == N

    rc = j.consume(dst, N, **{"isolation.level": "read_committed"})
    got = Counter(r.value for r in rc)
    assert {v for v, c in got.items() if c > 1} == set()
    assert set(got) == set(values)
    tags = {dict(r.headers)["txn"] for r in rc}
    assert tags == {str(t).encode() for t, _ in committed}    # nothing aborted is visible
    # each committed transaction is whole
    per_txn = Counter(dict(r.headers)["txn"] for r in rc)
    assert per_txn == Counter({str(t).encode(): n for t, n in committed})

    n_aborted = sum(n for _, n in aborted)
    ru = j.consume(dst, N + n_aborted, **{"isolation.level": "read_uncommitted"})
    assert len(ru) == N + n_aborted
    ru_tags = Counter(dict(r.headers)["txn"] for r in ru)
    for t, n in aborted:
        assert ru_tags[str(t).encode()] == n, (t, n)
    # the aborted attempts carried inputs that the committed output then holds once
    assert Counter(r.value for r in ru) - got == Counter(
        r.value for r in ru if int(dict(r.headers)["txn"]) in {t for t, _ in aborted})


@pytest.mark.parametrize("version", VERSIONS)
def test_java_zombie_producer_is_fenced(txn_broker, version):
    j = driver(txn_broker, version)
    topic = unique("jtxn-fence")
    j.create_topic(topic, 1)
    res = j.txn_fence(topic, unique("jtxn-fence-id"))
    assert res["a-sent"] == [] and res["b-init"] == [], res
    assert res["a-commit"][0] == "ProducerFencedException", res
    assert res["a-again"][0] != "ok", res      # a fenced producer stays unusable
    assert "b-committed" in res, res

    rc = j.consume(topic, 1, **{"isolation.level": "read_committed"})
    assert [r.value for r in rc] == [b"b-1"]
    ru = j.consume(topic, 2, **{"isolation.level": "read_uncommitted"})
    assert [r.value for r in ru] == [b"a-1", b"b-1"]
