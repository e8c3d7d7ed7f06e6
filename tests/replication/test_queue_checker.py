"""The fault harness's queue checker on crafted histories: each anomaly is reported, and a
clean history passes."""

import pytest

from compat_tests.cluster_faults.checker import History, check


def history(n=5, producer="p1", partition=0):
    h = History()
    for i in range(n):
        h.invoke(f"{producer}-{i}", producer, partition)
        h.ok(f"{producer}-{i}", partition, i)
    return h


def test_clean_history_passes():
    h = history()
    r = check(h, {0: [(i, f"p1-{i}") for i in range(5)]})
    assert r.ok and r.acked == 5 and r.read == 5, r.summary()


def test_lost_acknowledged_record():
    h = history()
    r = check(h, {0: [(i, f"p1-{i}") for i in (0, 1, 2, 4)]})
    assert r.lost == ["p1-3"] and not r.ok


def test_duplicate_and_moved():
    h = history(3)
    r = check(h, {0: [(0, "p1-0"), (1, "p1-1"), (2, "p1-1"), (3, "p1-2")]})
    assert [d[0] for d in r.duplicated] == ["p1-1"]
    assert [m[0] for m in r.moved] == ["p1-2"]       # acknowledged at 2, found at 3
    assert not r.ok


def test_unexpected_never_sent_or_definitely_failed():
    h = history(2)
    h.invoke("p1-2", "p1", 0)
    h.fail("p1-2", "NOT_ENOUGH_REPLICAS")
    r = check(h, {0: [(0, "p1-0"), (1, "p1-1"), (2, "p1-2"), (3, "ghost")]})
    assert sorted(u[0] for u in r.unexpected) == ["ghost", "p1-2"]


def test_reordered_within_a_producer():
    h = History()
    for i in range(3):
        h.invoke(f"a-{i}", "a", 0)
        h.invoke(f"b-{i}", "b", 0)
    for off, v in enumerate(["a-0", "b-0", "a-2", "b-1", "a-1", "b-2"]):
        h.ok(v, 0, off)
    r = check(h, {0: [(off, v) for off, v in enumerate(["a-0", "b-0", "a-2", "b-1", "a-1", "b-2"])]})
    assert r.reordered == [(0, "a-2", "a-1")]     # interleaving producers is fine; a's order is not


def test_indeterminate_sends_may_or_may_not_be_there():
    h = history(1)
    h.invoke("p1-1", "p1", 0)
    h.info("p1-1", "timed out")
    h.invoke("p1-2", "p1", 0)
    h.info("p1-2", "timed out")
    r = check(h, {0: [(0, "p1-0"), (1, "p1-1")]})
    assert r.ok and r.recovered == ["p1-1"] and r.indeterminate == 2


def test_values_must_be_unique():
    h = History()
    h.invoke("x", "p", 0)
    with pytest.raises(ValueError):
        h.invoke("x", "p", 0)
