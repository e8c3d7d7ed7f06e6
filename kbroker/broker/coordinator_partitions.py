"""Which partitions of a coordinator's internal topic this broker leads, as they change.

The group coordinator (``__consumer_offsets``) and the transaction coordinator
(``__transaction_state``) each keep one shard per partition they lead. A shard exists from
the moment this broker becomes the partition's leader (it is then replayed from the log,
with the leader epoch as its coordinator epoch) until leadership leaves or the topic is
deleted (then its state is dropped and whatever waits on it fails with NOT_COORDINATOR).
This module turns the replica manager's role changes into exactly those two calls, so both
coordinators follow leadership the same way:

    class MyCoordinator:                                  # a PartitionCoordinator
        def load(self, partition, coordinator_epoch): ...     # became leader (or startup)
        def unload(self, partition, coordinator_epoch): ...   # leadership left / topic gone

    watch = CoordinatorPartitions(broker, "__transaction_state", my_coordinator)
    watch.start()        # loads what this broker already leads; then follows role changes
    watch.stop()

``load`` runs when the local replica exists and leads (the replica manager calls its role
listeners after the log is open); a new leader epoch while still leading only updates the
epoch (``epoch_changed``, optional), since the leader's log never diverged. The calls come
from the event loop and must not block long (replay big partitions in slices).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from kbroker.replication.roles import RoleChange
from kbroker.wire.errors import Errors

log = logging.getLogger("kbroker.coordinator")


class PartitionCoordinator(Protocol):
    def load(self, partition: int, coordinator_epoch: int) -> None: ...

    def unload(self, partition: int, coordinator_epoch: int) -> None: ...


# How an append error of a coordinator write reaches the client (Kafka's
# GroupCoordinatorService / TransactionCoordinator normalize them the same way).
_WRITE_ERRORS = {
    Errors.UNKNOWN_TOPIC_OR_PARTITION: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_ENOUGH_REPLICAS: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.REQUEST_TIMED_OUT: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_LEADER_OR_FOLLOWER: Errors.NOT_COORDINATOR,
    Errors.KAFKA_STORAGE_ERROR: Errors.NOT_COORDINATOR,
    Errors.MESSAGE_TOO_LARGE: Errors.UNKNOWN_SERVER_ERROR,
    Errors.RECORD_LIST_TOO_LARGE: Errors.UNKNOWN_SERVER_ERROR,
    Errors.INVALID_FETCH_SIZE: Errors.UNKNOWN_SERVER_ERROR,
}


def coordinator_write_error(error: int) -> int:
    """The error a client gets when a coordinator's append (or its replication) failed."""
    return _WRITE_ERRORS.get(error, error)


class CoordinatorPartitions:
    def __init__(self, broker: Any, topic: str, coordinator: PartitionCoordinator) -> None:
        self.broker = broker
        self.topic = topic
        self.coordinator = coordinator
        self.epochs: dict[int, int] = {}     # partition -> coordinator epoch, while led here
        self._started = False

    def start(self) -> None:
        replicas = self.broker.replicas
        replicas.role_listeners.append(self._on_role)
        controller = getattr(self.broker, "controller", None)
        if controller is not None:
            controller.publishers.append(self._on_metadata_record)
        self._started = True
        for part in list(replicas.topics.get(self.topic, {}).values()):
            self._on_role(part, RoleChange.NONE)

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        try:
            self.broker.replicas.role_listeners.remove(self._on_role)
        except ValueError:
            pass
        controller = getattr(self.broker, "controller", None)
        if controller is not None and self._on_metadata_record in controller.publishers:
            controller.publishers.remove(self._on_metadata_record)

    def leads(self, partition: int) -> bool:
        return partition in self.epochs

    def _on_role(self, part: Any, change: RoleChange) -> None:
        if part.topic != self.topic or not self._started:
            return
        index = part.index
        if part.leader_state is not None:
            epoch = part.leader_epoch
            known = self.epochs.get(index)
            if known is None:
                self.epochs[index] = epoch
                self._call("load", index, epoch)
            elif epoch > known:
                self.epochs[index] = epoch
                bump = getattr(self.coordinator, "epoch_changed", None)
                if bump is not None:
                    bump(index, epoch)
        elif index in self.epochs:
            self._call("unload", index, self.epochs.pop(index))

    def _on_metadata_record(self, rec: Any, change: Any, offset: int) -> None:
        # The replica manager drops a deleted topic's partitions without a role change.
        if type(rec).__name__ == "RemoveTopicRecord" and getattr(change, "name", None) == self.topic:
            for index in sorted(self.epochs):
                self._call("unload", index, self.epochs.pop(index))

    def _call(self, what: str, index: int, epoch: int) -> None:
        log.info("%s %s-%d (coordinator epoch %d)", what, self.topic, index, epoch)
        try:
            getattr(self.coordinator, what)(index, epoch)
        except Exception:
            log.exception("%s of %s-%d failed", what, self.topic, index)
