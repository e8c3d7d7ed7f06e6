"""Which partition logs on disk are strays: this broker holds them but is no longer a replica.

Kafka's rule (``LogManager.isStrayKraftReplica``), applied once the broker's metadata image
has caught up with the controller's committed log (never against a partial image: at offset
0 every log would look stray):

* the log's topic id (its ``partition.metadata`` file) is not in the image: the topic was
  deleted, or deleted and re-created under the same name with a new id;
* the image has that topic id but not that partition index;
* the partition's replica set does not list this broker (it was reassigned away).

One deliberate difference: Kafka also calls a log without a topic id stray (it writes
``partition.metadata`` before the first append, so such a log holds nothing). kbroker keeps
such a log when the image lists a partition of that name on this broker, and the replica
manager adopts the id: a log of a partition this broker replicates is never moved aside.

Pure: an image and a list of local logs in, the strays (with the reason, for the log line) out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from kbroker.broker.storage import str_to_uuid


@dataclass(frozen=True)
class LocalLog:
    topic: str
    partition: int
    topic_id: str | None        # as partition.metadata holds it (base64url), None if absent


@dataclass(frozen=True)
class Stray:
    topic: str
    partition: int
    reason: str


def stray_reason(node_id: int, image, local: LocalLog) -> str | None:
    """Why ``local`` does not belong on broker ``node_id`` per ``image``; None if it does."""
    tid = _parse_id(local.topic_id)
    if tid is None:
        t = image.topics_by_name.get(local.topic)
        p = t.partitions.get(local.partition) if t is not None else None
        if p is not None and node_id in p.replicas:
            return None
        return "no topic id in partition.metadata, and no replica of that name here"
    t = image.topics_by_id.get(tid)
    if t is None:
        now = image.topics_by_name.get(local.topic)
        if now is not None:
            return f"topic id {local.topic_id} was deleted; {local.topic} now has another id"
        return f"topic id {local.topic_id} is not in the metadata"
    p = t.partitions.get(local.partition)
    if p is None:
        return f"topic {t.name} has no partition {local.partition}"
    if node_id not in p.replicas:
        return f"replicas {list(p.replicas)} do not include broker {node_id}"
    return None


def find_stray_logs(node_id: int, image, logs: Iterable[LocalLog]) -> list[Stray]:
    out = []
    for local in logs:
        reason = stray_reason(node_id, image, local)
        if reason is not None:
            out.append(Stray(local.topic, local.partition, reason))
    return out


def _parse_id(topic_id: str | None):
    if not topic_id:
        return None
    try:
        return str_to_uuid(topic_id)
    except (ValueError, TypeError):
        return None   # an unreadable id is no id
