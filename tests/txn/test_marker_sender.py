"""COMMIT/ABORT markers to partition leaders (kbroker.txn.marker_sender) over an in-memory
transport: batched per destination broker, retried as leaders move, fenced and stale jobs
stop, local partitions written directly."""

import asyncio

from kbroker.txn.coordinator import MarkerJob
from kbroker.txn.marker_sender import DONE, FENCED, STALE, MarkerSender
from kbroker.txn.txn_state import TxnState, TxnTransit
from kbroker.wire.errors import Errors
from kbroker.wire.generated.write_txn_markers_response import WriteTxnMarkersResponse as R


def job(txn_id, pid, partitions, commit=True, coordinator_epoch=4):
    complete = TxnTransit(pid, -1, 0, -1, 1000, TxnState.COMPLETE_COMMIT, frozenset(), 0, 0, -1)
    return MarkerJob(txn_id, 0, coordinator_epoch, pid, 0, commit, frozenset(partitions), complete)


class Cluster:
    """Leaders by partition; brokers answer from ``answers`` (default NONE)."""

    def __init__(self, leaders, local_id=1):
        self.leaders = dict(leaders)
        self.local_id = local_id
        self.requests = []              # (broker, request)
        self.local_writes = []
        self.answers = {}               # (broker, topic, partition) -> [codes, ...]
        self.down = set()
        self.gate = None                # an Event remote sends wait for

    async def send_to(self, broker, req):
        self.requests.append((broker, req))
        if self.gate is not None:
            await self.gate.wait()
        if broker in self.down:
            raise ConnectionError("down")
        out = []
        for m in req.markers:
            topics = []
            for t in m.topics:
                parts = []
                for p in t.partition_indexes:
                    codes = self.answers.get((broker, t.name, p))
                    code = codes.pop(0) if codes else Errors.NONE
                    parts.append(R.WritableTxnMarkerResult.WritableTxnMarkerTopicResult
                                 .WritableTxnMarkerPartitionResult(partition_index=p, error_code=code))
                topics.append(R.WritableTxnMarkerResult.WritableTxnMarkerTopicResult(
                    name=t.name, partitions=parts))
            out.append(R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
        return R(markers=out)

    async def write_local(self, topic, partition, pid, epoch, coordinator_epoch, commit):
        self.local_writes.append((topic, partition, pid, commit))
        return Errors.NONE

    def sender(self):
        return MarkerSender(self.local_id, lambda t, p: self.leaders.get((t, p), -1),
                            lambda t: True, self.write_local, self.send_to, retry_backoff_s=0.001)


def sent(cluster, broker):
    return [sorted((m.producer_id, t.name, p) for m in req.markers for t in m.topics
                   for p in t.partition_indexes)
            for b, req in cluster.requests if b == broker]


def test_markers_of_concurrent_transactions_share_one_request_per_broker():
    c = Cluster({("a", 0): 2, ("a", 1): 3, ("b", 0): 2, ("c", 0): 1})

    async def main():
        s = c.sender()
        outcomes = await asyncio.gather(
            s.write(job("t1", 10, [("a", 0), ("a", 1), ("c", 0)]), lambda: True),
            s.write(job("t2", 11, [("b", 0)]), lambda: True))
        await s.close()
        return outcomes

    assert asyncio.run(main()) == [DONE, DONE]
    assert sent(c, 2) == [[(10, "a", 0), (11, "b", 0)]]     # one request for both
    assert sent(c, 3) == [[(10, "a", 1)]]
    assert c.local_writes == [("c", 0, 10, True)]


def test_a_moved_leader_is_followed_and_only_the_failed_partition_is_retried():
    c = Cluster({("a", 0): 2, ("a", 1): 2})
    c.answers[(2, "a", 1)] = [Errors.NOT_LEADER_OR_FOLLOWER]

    async def main():
        s = c.sender()
        task = asyncio.create_task(s.write(job("t1", 10, [("a", 0), ("a", 1)]), lambda: True))
        while not c.requests:
            await asyncio.sleep(0)
        c.leaders[("a", 1)] = 3                 # the leader moved meanwhile
        out = await task
        await s.close()
        return out

    assert asyncio.run(main()) == DONE
    assert sent(c, 2) == [[(10, "a", 0), (10, "a", 1)]]
    assert sent(c, 3) == [[(10, "a", 1)]]


def test_an_unreachable_broker_is_retried_until_it_answers():
    c = Cluster({("a", 0): 2})
    c.down.add(2)

    async def main():
        s = c.sender()
        task = asyncio.create_task(s.write(job("t1", 10, [("a", 0)]), lambda: True))
        while len(c.requests) < 3:
            await asyncio.sleep(0.001)
        c.down.clear()
        out = await task
        await s.close()
        return out

    assert asyncio.run(main()) == DONE
    assert len(sent(c, 2)) >= 4


def test_fenced_and_stale_jobs_stop():
    c = Cluster({("a", 0): 2, ("b", 0): 3})
    c.answers[(2, "a", 0)] = [Errors.TRANSACTION_COORDINATOR_FENCED]
    c.answers[(3, "b", 0)] = [Errors.NOT_LEADER_OR_FOLLOWER] * 1000
    current = [True]

    async def main():
        s = c.sender()
        fenced = await s.write(job("t1", 10, [("a", 0)]), lambda: True)
        task = asyncio.create_task(s.write(job("t2", 11, [("b", 0)]), lambda: current[0]))
        while len(c.requests) < 3:
            await asyncio.sleep(0.001)
        current[0] = False                      # this coordinator lost the transaction
        stale = await task
        await s.close()
        return fenced, stale

    assert asyncio.run(main()) == (FENCED, STALE)
