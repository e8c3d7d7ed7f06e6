"""Kafka error codes the transaction coordinator answers with.

The values are Kafka's (errors.tsv). This subset keeps the pure state machines free of the
generated codec; ``kbroker.wire.errors.Errors`` members compare equal to these (both IntEnum).
"""

from __future__ import annotations

from enum import IntEnum


class TxnErrors(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    NOT_ENOUGH_REPLICAS = 19
    INVALID_REQUEST = 42
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_PRODUCER_ID = 59
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90
    TRANSACTIONAL_ID_NOT_FOUND = 105
    TRANSACTION_ABORTABLE = 120
