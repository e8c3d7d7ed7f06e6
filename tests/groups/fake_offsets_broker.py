"""An in-memory stand-in for the broker around a group coordinator runtime: __consumer_offsets
partitions with a log, a leader role, a high watermark the test moves by hand (as if followers
fetched), the replica manager's role listeners, and an append that can be told to fail."""
import asyncio
import uuid
from types import SimpleNamespace

from kbroker.groups.partitioning import OFFSETS_TOPIC
from kbroker.replication.roles import RoleChange
from kbroker.wire.records import RecordBatch


class FakeLog:
    def __init__(self):
        self.buffers = []
        self.high_watermark = 0

    @property
    def log_end_offset(self):
        return sum(RecordBatch(bytearray(b)).records_count for b in self.buffers)

    @property
    def size_in_bytes(self):
        return sum(len(b) for b in self.buffers)

    def batches(self, start_offset=None, max_offset=None):
        """As PartitionLog.batches: up to the log end as it was when iteration began."""
        limit = self.log_end_offset if max_offset is None else max_offset
        offset = 0
        for buf in list(self.buffers):
            b = RecordBatch(bytearray(buf))
            b.base_offset = offset
            offset = b.next_offset
            if b.base_offset >= limit:
                return
            if start_offset is None or offset > start_offset:
                yield b


class FakePart:
    def __init__(self, index, replicas=(1,)):
        self.topic = OFFSETS_TOPIC
        self.index = index
        self.log = FakeLog()
        self.leader_epoch = 0
        self.leader_state = None
        self.isr = list(replicas)
        self.producer_state = SimpleNamespace(last_entry=lambda pid: None)
        self.auto_commit = len(replicas) == 1   # one replica: committed on append

    @property
    def high_watermark(self):
        return self.log.high_watermark

    @property
    def log_end_offset(self):
        return self.log.log_end_offset


class FakeReplicas:
    def __init__(self, n, replicas=(1,)):
        self.topics = {OFFSETS_TOPIC: {p: FakePart(p, replicas) for p in range(n)}}
        self.role_listeners = []
        self.waits = []          # [(part, last offset, future)]
        self.fail_next_append = 0

    def get(self, topic, p):
        return self.topics.get(topic, {}).get(p)

    def min_insync_replicas(self, part):
        return 1

    def append(self, part, buf, now_ms, origin="client"):
        if self.fail_next_append:
            err, self.fail_next_append = self.fail_next_append, 0
            return SimpleNamespace(error=err, message="told to fail", last_offset=-1)
        part.log.buffers.append(bytes(buf))
        if part.auto_commit:
            part.log.high_watermark = part.log.log_end_offset
        return SimpleNamespace(error=0, message=None, last_offset=part.log.log_end_offset - 1)

    def await_replication(self, waits, timeout_ms):
        fut = asyncio.get_running_loop().create_future()
        for part, last in waits:
            self.waits.append((part, last, fut))
        self._check()
        return fut

    def advance(self, part, hw=None):
        """The followers caught up: the high watermark moves to ``hw`` (default: log end)."""
        part.log.high_watermark = part.log.log_end_offset if hw is None else hw
        self._check()

    def _check(self):
        keep = []
        for part, last, fut in self.waits:
            if last < part.high_watermark and not fut.done():
                fut.set_result({part: 0})
            elif not fut.done():
                keep.append((part, last, fut))
        self.waits = keep

    def set_role(self, p, leader, epoch):
        """What ReplicaManager.sync_role does: fail waits of a deposed leader, tell listeners."""
        part = self.get(OFFSETS_TOPIC, p)
        part.leader_epoch = epoch
        part.leader_state = SimpleNamespace(isr=part.isr) if leader else None
        if not leader:
            for q, _last, fut in self.waits:
                if q is part and not fut.done():
                    fut.set_result({part: 6})       # NOT_LEADER_OR_FOLLOWER
            self.waits = [w for w in self.waits if w[0] is not part]
        change = RoleChange.BECAME_LEADER if leader else RoleChange.BECAME_FOLLOWER
        for listener in list(self.role_listeners):
            listener(part, change)


def fake_broker(n, replicas=None, *, rf=1, leader=True):
    """A broker (node 1) leading all ``n`` partitions (unless ``leader`` is False)."""
    replicas = replicas or FakeReplicas(n, tuple(range(1, rf + 1)))
    for part in replicas.topics[OFFSETS_TOPIC].values():
        part.leader_state = SimpleNamespace(isr=part.isr) if leader else None
        part.leader_epoch = max(part.leader_epoch, 1)
    state = {p: SimpleNamespace(leader=1 if leader else 2) for p in range(n)}
    topic = SimpleNamespace(name=OFFSETS_TOPIC, topic_id=uuid.uuid4(), partitions=state)
    image = SimpleNamespace(topic=lambda name: topic if name == OFFSETS_TOPIC else None,
                            topics_by_name={OFFSETS_TOPIC: topic}, topics_by_id={}, offset=1,
                            live_brokers=lambda: [1])
    return SimpleNamespace(image=image, node_id=1, replicas=replicas, controller=None, config={})
