"""Loading a snapshot of the metadata image equals replaying the log it summarises."""

import random
import uuid

import pytest

from kbroker.kraft.controller import Controller, NewTopic
from kbroker.kraft.image import MetadataImage
from kbroker.kraft.image_snapshot import encode_image, image_records, load_image
from kbroker.kraft.records import decode_record, encode_record
from kbroker.kraft.snapshots import DirSnapshotStore, SnapshotId, build_snapshot, parse_snapshot

DEFAULTS = {"num.partitions": 2, "default.replication.factor": 1, "delete.topic.enable": True}


def state(img: MetadataImage):
    return (img.features, img.topics_by_name, img.configs, img.brokers, img.next_producer_id,
            {tid: t.name for tid, t in img.topics_by_id.items()})


def random_log(seed: int) -> list[bytes]:
    """Framed records of a random run of controller operations."""
    rng = random.Random(seed)
    ids = iter(uuid.UUID(int=rng.getrandbits(128)) for _ in range(10_000))
    c = Controller(1, DEFAULTS, uuid_factory=lambda: next(ids))
    log: list[bytes] = []

    def run(result):
        for rec in result.records:
            data = encode_record(rec)
            c.replay(decode_record(data), len(log))
            log.append(data)
        return result.response

    run(c.bootstrap(0))
    for step in range(60):
        op = rng.choice([0, 1, 1, 1, 2, 3, 3, 4, 5, 6, 6])
        if op == 0:
            run(c.register_broker(rng.randrange(1, 5), next(ids), [("PLAINTEXT", "h", 9000 + step, 0)],
                                  rng.choice([None, "r1"]), step))
        elif op == 1:
            res = run(c.create_topics([NewTopic(f"t{rng.randrange(12)}", num_partitions=rng.randrange(1, 4))], False, step))
        elif op == 2 and c.image.topics_by_name:
            name = rng.choice(sorted(c.image.topics_by_name))
            run(c.delete_topics([(name, None)], step))
        elif op == 3 and c.image.topics_by_name:
            name = rng.choice(sorted(c.image.topics_by_name))
            run(c.alter_configs(2, name, {"retention.ms": str(rng.randrange(1000)),
                                          "cleanup.policy": rng.choice([None, "compact"])}, step))
        elif op == 4:
            run(c.alter_configs(4, str(rng.randrange(1, 4)), {"log.retention.ms": rng.choice([None, "5"])}, step))
        elif op == 5:
            run(c.allocate_producer_ids(1, 0, step))
        elif op == 6 and c.image.topics_by_name:
            name = rng.choice(sorted(c.image.topics_by_name))
            n = len(c.image.topics_by_name[name].partitions)
            run(c.create_partitions([(name, n + 1, None)], False, step))
    return log


@pytest.mark.parametrize("seed", range(25))
def test_snapshot_then_rest_equals_full_replay(seed, tmp_path):
    log = random_log(seed)
    full = load_image(log)
    cut = random.Random(seed).randrange(len(log) + 1)
    head = load_image(log[:cut])
    # through Kafka's snapshot framing and a checkpoint file
    store = DirSnapshotStore(str(tmp_path))
    sid = SnapshotId(cut, 3)
    store.write(sid, build_snapshot(encode_image(head), 1234))
    assert (tmp_path / f"{cut:020d}-0000000003.checkpoint").exists()
    restored = load_image(parse_snapshot(store.read(sid)).records)
    assert state(restored) == state(head)
    for data in log[cut:]:
        restored.apply(decode_record(data))
    assert state(restored) == state(full)


def test_image_records_cover_every_part_of_the_image():
    img = load_image(random_log(3))
    kinds = {type(r).__name__ for r in image_records(img)}
    assert {"FeatureLevelRecord", "RegisterBrokerRecord", "TopicRecord", "PartitionRecord",
            "ConfigRecord", "ProducerIdsRecord"} <= kinds
