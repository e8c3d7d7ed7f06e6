"""The controller state machine (Kafka's QuorumController, for what this broker needs so far).

Every operation takes ``now_ms`` and returns ``ControllerResult(records, response)``: the
metadata records to append and the answer to give once they are committed. It never appends
anything itself and never reads a clock; ``kbroker.kraft.runtime`` appends the records to the
metadata log, replays them into the controller's image (``self.image``) and the broker's
image, and then releases the response. With one voter that happens at once; with a Raft
quorum the runtime waits for the commit, and nothing here changes.

Inputs and outputs are plain dataclasses, not wire messages, so handlers of any request
version (and internal callers, like Metadata's auto-create) use the same operations.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from kbroker.kraft.image import TOPIC_RESOURCE, MetadataImage
from kbroker.kraft.records import record_class
from kbroker.wire.errors import Errors

PRODUCER_ID_BLOCK_SIZE = 1000
# Kafka's bounds on one CreateTopics (QuorumController's MAX_RECORDS_PER_USER_OP and
# ReplicationControlManager's MAX_PARTITIONS_PER_BATCH): past either, every topic of the
# request fails with POLICY_VIOLATION and nothing is created
MAX_RECORDS_PER_USER_OP = 10_000
MAX_PARTITIONS_PER_BATCH = 10_000
METADATA_VERSION_FEATURE = "metadata.version"
METADATA_VERSION = 21          # 3.9-IV0
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")

# Topic configs that Kafka accepts but LogConfig does not interpret (kept as given).
EXTRA_TOPIC_CONFIGS = frozenset({
    "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
    "follower.replication.throttled.replicas", "leader.replication.throttled.replicas",
    "local.retention.bytes", "local.retention.ms", "remote.storage.enable",
    "remote.log.copy.disable", "remote.log.delete.on.disable",
})


def _cls(name: str):
    from kbroker.kraft.records import TYPE_BY_NAME
    return record_class(TYPE_BY_NAME[name])


def metadata_version_record(level: int):
    return _cls("FeatureLevelRecord")(name=METADATA_VERSION_FEATURE, feature_level=level)


class ControllerResult(NamedTuple):
    records: list
    response: Any


@dataclass
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: dict[int, list[int]] | None = None   # partition -> replicas
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass
class TopicResult:
    name: str
    error: int = 0
    message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)   # the topic's own overrides


def partitions_asked(t: NewTopic, default_partitions: int) -> int:
    """The partitions one topic of a CreateTopics asks for, counted as Kafka bounds them."""
    if t.assignments:
        return len(t.assignments)
    if t.num_partitions == -1:
        return default_partitions
    return max(t.num_partitions, 0)


def _refuse_all(topics: list[NewTopic], message: str) -> ControllerResult:
    return ControllerResult([], [TopicResult(t.name, Errors.POLICY_VIOLATION, message) for t in topics])


@dataclass
class DeleteResult:
    name: str | None
    topic_id: uuid.UUID | None
    error: int = 0
    message: str | None = None


def validate_topic_name(name: str | None) -> str | None:
    """Kafka's Topic.validate: the error message, or None when the name is legal."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
    if not _LEGAL_TOPIC.match(name):
        return (f"Topic name \"{name}\" is illegal, it contains a character other than "
                "ASCII alphanumerics, '.', '_' and '-'")
    return None


class Controller:
    def __init__(self, node_id: int, defaults: dict[str, Any], *,
                 image: MetadataImage | None = None,
                 uuid_factory: Callable[[], uuid.UUID] | None = None,
                 config_validator: Callable[[dict[str, str]], None] | None = None) -> None:
        """``defaults``: num.partitions, default.replication.factor, delete.topic.enable.
        ``config_validator`` raises ValueError on topic configs LogConfig rejects."""
        self.node_id = node_id
        self.defaults = defaults
        self.image = image or MetadataImage()
        self.next_offset = 0   # the offset the next appended record gets (set by the runtime)
        if uuid_factory is None:
            from kbroker.broker.storage import random_uuid
            uuid_factory = random_uuid
        self._uuid = uuid_factory
        self._validate_configs = config_validator
        self.bootstrap_records: list = []   # extra records of a new cluster (format --add-scram)

    def replay(self, record: Any, offset: int = -1) -> None:
        self.image.apply(record, offset)
        if offset >= 0:
            self.next_offset = offset + 1

    # -- bootstrap and brokers ---------------------------------------------------------------

    def bootstrap(self, now_ms: int) -> ControllerResult:
        """Records a new cluster starts with (Kafka's bootstrap metadata)."""
        if METADATA_VERSION_FEATURE in self.image.features:
            return ControllerResult([], None)
        # what `format` asked for (--add-scram, --release-version: kbroker.security.bootstrap)
        chosen = [r for r in self.bootstrap_records
                  if type(r).__name__ == "FeatureLevelRecord" and r.name == METADATA_VERSION_FEATURE]
        return ControllerResult(([] if chosen else [metadata_version_record(METADATA_VERSION)])
                                + list(self.bootstrap_records), None)

    def update_features(self, updates: list, validate_only: bool, now_ms: int) -> ControllerResult:
        """UpdateFeatures: FeatureLevelRecords for accepted changes; the response is a
        ``feature_control.FeatureUpdateResult`` (kbroker.kraft.feature_control)."""
        from kbroker.kraft.feature_control import supported_features, validate_updates
        res = validate_updates(updates, self.image.features, supported_features(METADATA_VERSION))
        Rec = _cls("FeatureLevelRecord")
        recs = [] if res.error_code or validate_only else [
            Rec(name=n, feature_level=level) for n, level in res.levels.items()]
        return ControllerResult(recs, res)

    def register_broker(self, broker_id: int, incarnation_id: uuid.UUID,
                        endpoints: list[tuple[str, str, int, int]], rack: str | None,
                        now_ms: int) -> ControllerResult:
        """Register (or re-register) a broker and unfence it; the response is its epoch."""
        Reg = _cls("RegisterBrokerRecord")
        epoch = self.next_offset
        eps = [Reg.BrokerEndpoint(name=n, host=h, port=p, security_protocol=sp) for n, h, p, sp in endpoints]
        feats = [Reg.BrokerFeature(name=METADATA_VERSION_FEATURE, min_supported_version=1,
                                   max_supported_version=METADATA_VERSION)]
        reg = Reg(broker_id=broker_id, incarnation_id=incarnation_id, broker_epoch=epoch,
                  end_points=eps, features=feats, rack=rack, fenced=True)
        unfence = _cls("UnfenceBrokerRecord")(id=broker_id, epoch=epoch)
        return ControllerResult([reg, unfence], epoch)

    # -- topics ------------------------------------------------------------------------------

    def create_topics(self, topics: list[NewTopic], validate_only: bool, now_ms: int) -> ControllerResult:
        default = self.defaults["num.partitions"]
        if sum(partitions_asked(t, default) for t in topics) > MAX_PARTITIONS_PER_BATCH:
            return _refuse_all(topics, "Excessively large number of partitions per request.")
        records: list = []
        results: list[TopicResult] = []
        names = [t.name for t in topics]
        dupes = {n for n in names if names.count(n) > 1}
        pending: set[str] = set()
        for t in topics:
            if t.name in dupes:
                results.append(TopicResult(t.name, Errors.INVALID_REQUEST,
                                           f"Create topics request from client contains multiple entries for topic {t.name}"))
                continue
            res, recs = self._create_topic(t, pending)
            results.append(res)
            if res.error == 0:
                pending.add(t.name)
                records += recs   # (validate_only counts them too, as Kafka's bounded list does)
        if len(records) > MAX_RECORDS_PER_USER_OP:
            return _refuse_all(topics, "Unable to perform excessively large batch operation.")
        return ControllerResult([] if validate_only else records, results)

    def _create_topic(self, t: NewTopic, pending: set[str]) -> tuple[TopicResult, list]:
        def fail(code, msg):
            return TopicResult(t.name, code, msg), []

        err = validate_topic_name(t.name)
        if err:
            return fail(Errors.INVALID_TOPIC_EXCEPTION, err)
        if t.name in self.image.topics_by_name or t.name in pending:
            return fail(Errors.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
        norm = t.name.replace(".", "_")
        for other in list(self.image.topics_by_name) + list(pending):
            if other.replace(".", "_") == norm:
                return fail(Errors.INVALID_TOPIC_EXCEPTION, f"Topic '{t.name}' collides with existing topic: {other}")
        # configs
        configs: dict[str, str] = {}
        for k, v in t.configs.items():
            if v is None:
                return fail(Errors.INVALID_REQUEST, f"Null value not supported for topic configs: {k}")
            configs[k] = v
        if self._validate_configs is not None and configs:
            try:
                self._validate_configs(configs)
            except ValueError as e:
                return fail(Errors.INVALID_CONFIG, str(e))
        live = sorted(b.broker_id for b in self.image.live_brokers())
        # partitions and replicas
        if t.assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                return fail(Errors.INVALID_REQUEST,
                            "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.")
            parts = sorted(t.assignments)
            if parts != list(range(len(parts))):
                return fail(Errors.INVALID_REPLICA_ASSIGNMENT,
                            "Unable to create topic: the partitions did not have consecutive ids starting at 0.")
            rfs = {len(r) for r in t.assignments.values()}
            if len(rfs) != 1 or 0 in rfs:
                return fail(Errors.INVALID_REPLICA_ASSIGNMENT, "All partitions should have the same number of replicas.")
            for p, reps in t.assignments.items():
                if len(set(reps)) != len(reps):
                    return fail(Errors.INVALID_REPLICA_ASSIGNMENT,
                                f"The manual partition assignment includes a partition with duplicate replica {reps}.")
                for r in reps:
                    if r not in self.image.brokers:
                        return fail(Errors.INVALID_REPLICA_ASSIGNMENT,
                                    f"The manual partition assignment includes broker {r}, but no such broker is registered.")
            assignment = {p: list(t.assignments[p]) for p in parts}
            num_partitions, rf = len(parts), rfs.pop()
        else:
            num_partitions = t.num_partitions if t.num_partitions != -1 else self.defaults["num.partitions"]
            rf = t.replication_factor if t.replication_factor != -1 else self.defaults["default.replication.factor"]
            if num_partitions <= 0:
                return fail(Errors.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
            if rf <= 0:
                return fail(Errors.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
            if rf > len(live):
                return fail(Errors.INVALID_REPLICATION_FACTOR,
                            f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} "
                            f"cannot be reached because only {len(live)} broker(s) are registered.")
            from kbroker.kraft.partition_change import assign_replicas
            assignment = dict(enumerate(assign_replicas(self.image, live, t.name, 0, num_partitions, rf)))
        topic_id = self._uuid()
        recs: list = [_cls("TopicRecord")(name=t.name, topic_id=topic_id)]
        Config = _cls("ConfigRecord")
        for k, v in configs.items():
            recs.append(Config(resource_type=TOPIC_RESOURCE, resource_name=t.name, name=k, value=v))
        Part = _cls("PartitionRecord")
        for p, reps in assignment.items():
            isr = [r for r in reps if r in live] or reps[:1]
            leader = isr[0]
            recs.append(Part(partition_id=p, topic_id=topic_id, replicas=reps, isr=isr,
                             removing_replicas=[], adding_replicas=[], leader=leader,
                             leader_epoch=0, partition_epoch=0))
        return TopicResult(t.name, 0, None, topic_id, num_partitions, rf, configs), recs

    def delete_topics(self, targets: list[tuple[str | None, uuid.UUID | None]], now_ms: int) -> ControllerResult:
        records: list = []
        results: list[DeleteResult] = []
        seen: set = set()
        enabled = self.defaults.get("delete.topic.enable", True)
        for name, topic_id in targets:
            if name is not None and topic_id is not None:
                results.append(DeleteResult(name, topic_id, Errors.INVALID_REQUEST,
                                            "Only one of the topic name or topic id may be set."))
                continue
            t = self.image.topics_by_name.get(name) if name is not None else self.image.topics_by_id.get(topic_id)
            if t is None:
                if name is not None:
                    results.append(DeleteResult(name, None, Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                                "This server does not host this topic-partition."))
                else:
                    results.append(DeleteResult(None, topic_id, Errors.UNKNOWN_TOPIC_ID,
                                                "This server does not host this topic ID."))
                continue
            if not enabled:
                results.append(DeleteResult(t.name, t.topic_id, Errors.TOPIC_DELETION_DISABLED,
                                            "Topic deletion is disabled."))
                continue
            results.append(DeleteResult(t.name, t.topic_id))
            if t.topic_id not in seen:
                seen.add(t.topic_id)
                records.append(_cls("RemoveTopicRecord")(topic_id=t.topic_id))
        return ControllerResult(records, results)

    def create_partitions(self, topics: list[tuple[str, int, list[list[int]] | None]], validate_only: bool,
                          now_ms: int) -> ControllerResult:
        """CreatePartitions: grow each (name, new count, assignments of the new partitions or
        None) topic; response [(name, error, message)]. Kafka's checks and messages
        (ReplicationControlManager.createPartitions); new partitions get PartitionRecords."""
        names = [t[0] for t in topics]
        records: list = []
        results: list = []
        for name, count, assignments in topics:
            if names.count(name) > 1:
                results.append((name, Errors.INVALID_REQUEST, "Duplicate topic name."))
                continue
            err, recs = self._grow_topic(name, count, assignments)
            results.append((name,) + err)
            if not validate_only:
                records += recs
        return ControllerResult(records, results)

    def _grow_topic(self, name: str, count: int, assignments) -> tuple[tuple[int, str | None], list]:
        t = self.image.topics_by_name.get(name)
        if t is None:
            return (Errors.UNKNOWN_TOPIC_OR_PARTITION, None), []
        have = len(t.partitions)
        if count == have:
            return (Errors.INVALID_PARTITIONS, f"Topic already has {have} partition(s)."), []
        if count < have:
            return (Errors.INVALID_PARTITIONS,
                    f"The topic {name} currently has {have} partition(s); {count} would not be an increase."), []
        extra = count - have
        if assignments is not None and len(assignments) != extra:
            return (Errors.INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {extra} additional partition(s), "
                    f"but only {len(assignments)} assignment(s) were specified."), []
        rf = len(next(iter(t.partitions.values())).replicas)
        live = sorted(b.broker_id for b in self.image.live_brokers())
        if assignments is not None:
            for reps in assignments:
                if not reps:
                    return (Errors.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."), []
                for r in sorted(reps):
                    if r not in self.image.brokers:
                        return (Errors.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes broker {r}, "
                                "but no such broker is registered."), []
                if len(set(reps)) != len(reps):
                    return (Errors.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes the broker "
                            f"{next(r for r in reps if reps.count(r) > 1)} more than once."), []
                if len(reps) != rf:
                    return (Errors.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes a partition with "
                            f"{len(reps)} replica(s), but this is not consistent with previous partitions, which have "
                            f"{rf} replica(s)."), []
            placed = [list(r) for r in assignments]
        else:
            if rf > len(live):
                return (Errors.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition {rf} time(s): The target "
                        f"replication factor of {rf} cannot be reached because only {len(live)} broker(s) are registered."), []
            from kbroker.kraft.partition_change import assign_replicas   # continues create_topics' placement
            placed = assign_replicas(self.image, live, name, have, count - have, rf)
        Part = _cls("PartitionRecord")
        recs = []
        for p, reps in enumerate(placed, start=have):
            isr = [r for r in reps if r in live]
            if not isr:
                return (Errors.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition {rf} time(s): All brokers "
                        "are currently fenced or in controlled shutdown."), []
            recs.append(Part(partition_id=p, topic_id=t.topic_id, replicas=reps, isr=isr, removing_replicas=[],
                             adding_replicas=[], leader=isr[0], leader_epoch=0, partition_epoch=0))
        return (Errors.NONE, None), recs

    # -- configs -----------------------------------------------------------------------------

    def alter_configs(self, resource_type: int, resource_name: str, changes: dict[str, str | None],
                      now_ms: int) -> ControllerResult:
        """Set (value) or delete (None) config keys of one resource; validation is the
        caller's (the admin handlers know the incremental semantics)."""
        Config = _cls("ConfigRecord")
        recs = [Config(resource_type=resource_type, resource_name=resource_name, name=k, value=v)
                for k, v in changes.items()]
        return ControllerResult(recs, None)

    # -- producer ids ------------------------------------------------------------------------

    def alter_partition(self, req, version: int, now_ms: int) -> ControllerResult:
        """AlterPartition from a partition leader (ISR changes): kbroker.kraft.partition_change."""
        from kbroker.kraft.partition_change import answer_alter_partition
        records, response = answer_alter_partition(self.image, req, version)
        return ControllerResult(records, response)

    def allocate_producer_ids(self, broker_id: int, broker_epoch: int, now_ms: int) -> ControllerResult:
        """A block of PRODUCER_ID_BLOCK_SIZE producer ids; response (first id, size)."""
        start = self.image.next_producer_id
        rec = _cls("ProducerIdsRecord")(broker_id=broker_id, broker_epoch=broker_epoch,
                                       next_producer_id=start + PRODUCER_ID_BLOCK_SIZE)
        return ControllerResult([rec], (start, PRODUCER_ID_BLOCK_SIZE))
