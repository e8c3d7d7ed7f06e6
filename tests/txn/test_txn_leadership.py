"""The transaction coordinator follows leadership of __transaction_state, and answers a write
only once it is replicated: NOT_COORDINATOR after unloading, COORDINATOR_LOAD_IN_PROGRESS while
loading (and the replayed state after), a failed replication undone in memory, and the
partition's min.insync.replicas (transaction.state.log.min.isr) refusing writes."""

from __future__ import annotations

from kbroker.txn.txn_log import TRANSACTION_STATE_TOPIC
from kbroker.wire.errors import Errors
from kbroker.wire.generated.incremental_alter_configs_request import IncrementalAlterConfigsRequest
from tests.txn.test_txn_handlers import h, init_pid  # noqa: F401 (the fixture)


def _partition(h, txn_id="tx"):
    index = h.rt.coordinator.partition_for(txn_id)
    return index, h.server.replicas.get(TRANSACTION_STATE_TOPIC, index)


def _in_loop(h, fn, *args):
    """Call ``fn`` from the broker's event loop (the role listener's context)."""
    async def call():
        return fn(*args)
    return h.loop.run_until_complete(call())


def _init(h, txn_id="tx"):
    return h.loop.run_until_complete(h.rt.init_producer_id(txn_id, 60_000, -1, -1))


def test_unload_answers_not_coordinator_and_reload_replays_the_log(h):
    pid, epoch = init_pid(h)
    index, part = _partition(h)
    _in_loop(h, h.rt.unload, index, part.leader_epoch)
    assert _init(h).error == Errors.NOT_COORDINATOR
    assert h.rt.coordinator.get("tx") is None

    def load_then_ask():
        h.rt.load(index, part.leader_epoch)
        return h.rt.coordinator.init_producer_id("tx", 60_000, 0).error
    assert _in_loop(h, load_then_ask) == Errors.COORDINATOR_LOAD_IN_PROGRESS   # replay pending
    h.settle()
    assert h.rt.coordinator.owned_partitions()[index] == part.leader_epoch
    out = _init(h)                      # the replayed id: same producer, next epoch
    assert (out.error, out.producer_id, out.producer_epoch) == (0, pid, epoch + 1)


def test_a_failed_replication_is_undone_in_memory(h, monkeypatch):
    pid, epoch = init_pid(h)

    async def not_replicated(part, last_offset):
        return Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    monkeypatch.setattr(h.rt, "_replicated", not_replicated)
    out = _init(h)
    assert out.error == Errors.COORDINATOR_NOT_AVAILABLE
    md = h.rt.coordinator.get("tx")
    assert md.producer_epoch == epoch and md.pending_state is None
    monkeypatch.undo()
    assert init_pid(h) == (pid, epoch + 1)      # not epoch + 2: the failed bump is gone


def test_min_insync_replicas_of_the_state_topic_refuses_writes(h):
    pid, epoch = init_pid(h)
    index, part = _partition(h)
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    C = R.AlterableConfig
    r = h.call(44, 1, IncrementalAlterConfigsRequest(resources=[R(
        resource_type=2, resource_name=TRANSACTION_STATE_TOPIC,
        configs=[C(name="min.insync.replicas", config_operation=0, value="2")])]))
    assert r.responses[0].error_code == 0, r
    end = part.log_end_offset
    assert _init(h).error == Errors.COORDINATOR_NOT_AVAILABLE       # NOT_ENOUGH_REPLICAS
    assert part.log_end_offset == end                               # nothing appended
    assert h.rt.coordinator.get("tx").producer_epoch == epoch


def test_the_state_topic_is_created_with_its_min_isr(h):
    _, part = _partition(h)
    assert part.config.min_insync_replicas == 1   # transaction.state.log.min.isr, capped at RF 1
