"""What the group handlers share: reaching the coordinator and describing the caller."""
from __future__ import annotations

from kbroker.clock import SYSTEM_CLOCK
from kbroker.groups import errors
from kbroker.groups.config import GroupConfig
from kbroker.groups.runtime import CoordinatorError, GroupCoordinatorRuntime


def coordinator(ctx) -> GroupCoordinatorRuntime:
    """The broker's group coordinator (``broker.groups``), started on first use if the broker
    assembly has not started it already."""
    broker = ctx.broker
    rt = getattr(broker, "groups", None)
    if rt is None:
        if getattr(broker, "replicas", None) is None:
            raise CoordinatorError(errors.COORDINATOR_NOT_AVAILABLE)
        rt = attach(broker)
    return rt


def attach(broker) -> GroupCoordinatorRuntime:
    """Create and start the coordinator for ``broker`` (needs a running event loop)."""
    clock = getattr(broker, "clock", None)
    if clock is None:
        clock = SYSTEM_CLOCK
    rt = GroupCoordinatorRuntime(broker, GroupConfig.from_broker(broker.config), clock.now_ms)
    broker.groups = rt
    rt.start()
    return rt


def client_host(ctx) -> str:
    peer = getattr(ctx.conn, "peer", None)
    if isinstance(peer, tuple) and peer:
        return f"/{peer[0]}"
    return "" if peer is None else f"/{peer}"


def known_partitions(ctx, topic: str) -> set[int] | None:
    """Partitions of ``topic`` in the metadata image, or None if it does not exist."""
    t = ctx.broker.image.topic(topic)
    return None if t is None else set(t.partitions)
