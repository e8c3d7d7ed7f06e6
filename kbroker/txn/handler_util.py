"""Shared by the transaction handlers: reaching the coordinator runtime, and the error codes
older request versions cannot carry."""

from __future__ import annotations

from kbroker.wire.errors import Errors


def txn_runtime(ctx):
    """The broker's TxnRuntime, or None while the broker runs without one."""
    return getattr(ctx.broker, "txn_coordinator", None)


def fenced_for(version: int, first_version_with_producer_fenced: int, error: int) -> int:
    """Versions before PRODUCER_FENCED existed get INVALID_PRODUCER_EPOCH instead (Kafka)."""
    if error == Errors.PRODUCER_FENCED and version < first_version_with_producer_fenced:
        return Errors.INVALID_PRODUCER_EPOCH
    return error


def abortable_for(version: int, first_version_with_abortable: int, error: int) -> int:
    """TRANSACTION_ABORTABLE (KIP-890) is INVALID_TXN_STATE for older clients."""
    if error == Errors.TRANSACTION_ABORTABLE and version < first_version_with_abortable:
        return Errors.INVALID_TXN_STATE
    return error
