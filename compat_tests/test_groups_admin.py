"""Group administration against a broker process: offset expiry in the running broker
(tombstones in __consumer_offsets, nothing back after a restart) and `kbroker groups` as
kafka-consumer-groups.sh is used (list with states, describe --all-groups/--members/--state,
reset-offsets --all-topics/--to-current/--by-duration/--export, KIP-848 groups)."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from compat_tests.brokers import BrokerProcess
from compat_tests.test_groups import OVERRIDES, committed, create_topic, produce, unique

pytestmark = pytest.mark.timeout(60)


def test_offsets_expire_in_the_running_broker_and_stay_gone_after_restart(tmp_path):
    from kbroker.groups.admin_client import AdminClient
    b = BrokerProcess(tmp_path / "b", overrides={**OVERRIDES, "offsets.retention.check.interval.ms": "300"}).start()
    try:
        bs = b.bootstrap
        topic, doomed, kept = unique("exp"), unique("doomed"), unique("kept")
        create_topic(bs, topic, 2)
        with AdminClient(bs) as k:
            # OffsetCommit v4's retention: the only sub-minute retention Kafka has
            assert set(k.commit(doomed, {(topic, 0): 3, (topic, 1): 4}, retention_ms=1000).values()) == {0}
            assert set(k.commit(kept, {(topic, 0): 5}).values()) == {0}
            assert {g.group_id for g in k.list_groups()} >= {doomed, kept}
            deadline = time.monotonic() + 15
            while k.committed(doomed):
                assert time.monotonic() < deadline, "offsets did not expire"
                time.sleep(0.2)
            assert doomed not in {g.group_id for g in k.list_groups()}
            assert k.committed(kept) == {(topic, 0): (5, "")}

        # the expiry is in the log: tombstones for the group's offsets in __consumer_offsets
        c = Consumer({"bootstrap.servers": bs, "group.id": unique("reader"), "enable.auto.commit": False,
                      "enable.partition.eof": True})
        c.assign([TopicPartition("__consumer_offsets", p, 0) for p in range(5)])
        tombstones, eofs, deadline = 0, set(), time.monotonic() + 20
        while len(eofs) < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                eofs.add(m.partition())
                continue
            if doomed.encode() in (m.key() or b"") and m.value() is None:
                tombstones += 1
        c.close()
        assert tombstones == 2

        b.stop()
        b.start()
        assert committed(bs, doomed, topic, 2) == {0: -1001, 1: -1001}     # OFFSET_INVALID: nothing
        assert committed(bs, kept, topic, 2)[0] == 5
        with AdminClient(bs) as k:
            assert doomed not in {g.group_id for g in k.list_groups()}
    finally:
        b.kill()


def kgroups(bs: str, *args: str):
    from compat_tests.test_groups import kbroker_groups
    out = kbroker_groups(bs, *args)
    return out


def rows(text: str, first: str) -> list[list[str]]:
    """Whitespace-split table rows whose first column is ``first``."""
    return [line.split() for line in text.splitlines() if line.split()[:1] == [first]]


@pytest.fixture(scope="module")
def abroker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("gadmin"), overrides=OVERRIDES).start()
    yield b
    b.stop()


def test_cli_list_describe_and_reset_like_kafka_consumer_groups(abroker, tmp_path):
    from compat_tests.test_groups import consumer, poll_round
    bs = abroker.bootstrap
    topic, group = unique("cli"), unique("g")
    create_topic(bs, topic, 2)
    now = int(time.time() * 1000)
    produce(bs, topic, 40, 2, timestamp=now - 7_200_000)        # 2 h ago: offsets 0-19 per partition
    produce(bs, topic, 20, 2, start=40, timestamp=now - 60_000)  # 1 min ago: offsets 20-29
    c = consumer(bs, group)
    c.subscribe([topic])
    seen: dict = {}
    deadline = time.monotonic() + 20
    while sum(len(v) for v in seen.values()) < 60:
        assert time.monotonic() < deadline
        poll_round([c], seen)
    try:
        out = kgroups(bs, "list")
        assert [group, "classic", "consumer", "Stable"] in rows(out.stdout, group)
        assert group in kgroups(bs, "list", "--state", "Stable").stdout
        assert group not in kgroups(bs, "list", "--state", "Empty").stdout
        assert group not in kgroups(bs, "list", "--type", "consumer").stdout

        out = kgroups(bs, "describe", "--all-groups")
        assert out.returncode == 0, out.stderr
        mine = rows(out.stdout, group)
        assert sorted((r[1], r[2], r[3], r[4], r[5]) for r in mine) == [(topic, "0", "30", "30", "0"),
                                                                       (topic, "1", "30", "30", "0")]
        out = kgroups(bs, "describe", group, "--members", "--verbose")
        [m] = rows(out.stdout, group)
        assert m[-2:] == ["2", f"{topic}:(0,1)"]
        out = kgroups(bs, "describe", "--group", group, "--state")
        [s] = rows(out.stdout, group)
        assert s[-3:] == ["range", "Stable", "1"]
        refused = kgroups(bs, "reset-offsets", group, "--all-topics", "--to-earliest", "--dry-run")
        assert refused.returncode == 1 and "inactive" in refused.stderr
    finally:
        c.close()

    plan = tmp_path / "plan.csv"
    out = kgroups(bs, "reset-offsets", "--group", group, "--all-topics", "--by-duration", "PT30M", "--export")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [f"{topic},0,20", f"{topic},1,20"]          # the CSV alone
    plan.write_text(out.stdout)
    assert committed(bs, group, topic, 2) == {0: 30, 1: 30}                  # a dry run
    assert kgroups(bs, "reset-offsets", group, "--all-topics", "--to-earliest", "--execute").returncode == 0
    assert committed(bs, group, topic, 2) == {0: 0, 1: 0}
    out = kgroups(bs, "reset-offsets", group, "--from-file", str(plan), "--execute")
    assert out.returncode == 0, out.stderr
    assert committed(bs, group, topic, 2) == {0: 20, 1: 20}
    out = kgroups(bs, "reset-offsets", group, "--topic", topic, "--to-current", "--export")
    assert out.stdout.split() == [f"{topic},0,20", f"{topic},1,20"]
    out = kgroups(bs, "describe", group, "--state")
    assert rows(out.stdout, group)[0][-2:] == ["Empty", "0"]
    assert "no active members" in out.stderr
    missing = kgroups(bs, "describe", unique("nope"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_cli_describes_a_kip848_group_with_consumer_group_describe(abroker, tmp_path):
    from compat_tests.test_groups_kip848 import Member, wait_for
    bs = abroker.bootstrap
    topic, group = unique("cli848"), unique("g")
    create_topic(bs, topic, 3)
    produce(bs, topic, 30, 3)
    m = Member(bs, "4.3.0", topic, group, "group.remote.assignor=range", log_dir=tmp_path)
    try:
        wait_for(lambda: len(m.owned()) == 3 and len(m.records()) == 30, 30, "one member owning 3", [m])
        out = kgroups(bs, "list", "--type", "consumer")
        assert [group, "consumer", "consumer", "Stable"] in rows(out.stdout, group)
        out = kgroups(bs, "describe", group, "--state", "--verbose")
        [s] = rows(out.stdout, group)
        assert s[3:6] == ["range", "Stable", "1"] and int(s[6]) >= 1 and s[6] == s[7]   # group epoch = target epoch
        out = kgroups(bs, "describe", group, "--members", "--verbose")
        [r] = rows(out.stdout, group)
        assert r[4] == "3" and r[-2:] == [f"{topic}:(0,1,2)", f"{topic}:(0,1,2)"]
        out = kgroups(bs, "describe", group)
        assert sorted(r[2:6] for r in rows(out.stdout, group)) == [[str(p), "10", "10", "0"] for p in range(3)]
        refused = kgroups(bs, "reset-offsets", group, "--all-topics", "--to-earliest", "--execute")
        assert refused.returncode == 1 and "inactive" in refused.stderr
    finally:
        m.close()
    out = kgroups(bs, "reset-offsets", group, "--all-topics", "--shift-by", "-4", "--execute")
    assert out.returncode == 0, out.stderr
    assert committed(bs, group, topic, 3) == {0: 6, 1: 6, 2: 6}
