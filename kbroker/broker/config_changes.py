"""AlterConfigs and IncrementalAlterConfigs: Kafka's checks, then ConfigRecords through the
controller.

``preprocess`` makes the broker-side checks Kafka makes before forwarding to its controller
(ConfigAdminManager): each resource at most once, no duplicate keys, no null values, a
BROKER name that is empty or this node's id, dynamic broker configs only. ``alter_op`` is the
controller operation (ConfigurationControlManager): it computes each resource's new config set
against the controller's image, validates the whole set, and returns one ConfigRecord per
changed key; a resource that fails changes nothing. ``apply_broker_defaults`` makes committed
broker-level log configs (log.retention.ms ...) the defaults of the live logs.
"""

from __future__ import annotations

from dataclasses import dataclass

from kbroker.broker.config_catalog import (TOPIC_CONFIGS, BrokerLayers, is_list_config,
                                           validate_broker_change, validate_topic_configs)
from kbroker.config import BROKER_CONFIGS
from kbroker.kraft.controller import ControllerResult, validate_topic_name
from kbroker.kraft.image import BROKER_RESOURCE, TOPIC_RESOURCE
from kbroker.log.config import LogConfig
from kbroker.log.errors import InvalidConfigError
from kbroker.wire.errors import Errors

BROKER_LOGGER_RESOURCE = 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


@dataclass
class Change:
    """One resource's requested change. ``ops``: (name, operation, value); the legacy API
    sends only SETs with ``replace=True`` (keys it does not list are deleted)."""
    resource_type: int
    resource_name: str
    ops: list[tuple[str, int, str | None]]
    replace: bool = False


class _Fail(Exception):
    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def preprocess(changes: list[Change], node_id: int | None) -> list[tuple[int, str | None] | None]:
    """Per change: None when it may go to the controller, else (error code, message)."""
    keys = [(c.resource_type, c.resource_name) for c in changes]
    out: list = []
    for c, key in zip(changes, keys):
        if keys.count(key) > 1:
            out.append((Errors.INVALID_REQUEST, "Each resource must appear at most once."))
            continue
        try:
            _precheck(c, node_id)
            out.append(None)
        except _Fail as f:
            out.append((f.code, f.message))
    return out


def _precheck(c: Change, node_id: int | None) -> None:
    names = [n for n, _, _ in c.ops]
    if len(set(names)) != len(names):
        raise _Fail(Errors.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [n for n, op, v in c.ops if op != DELETE and v is None]
    if nulls:
        raise _Fail(Errors.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))
    for n, op, _ in c.ops:
        if op not in (SET, DELETE, APPEND, SUBTRACT):
            raise _Fail(Errors.INVALID_REQUEST, f"Unknown operation type {op} for config {n}")
    if c.resource_type == BROKER_RESOURCE:
        if c.resource_name:
            try:
                bid = int(c.resource_name)
            except ValueError:
                raise _Fail(Errors.INVALID_REQUEST, f"Node id must be an integer, but it is: {c.resource_name}") from None
            if node_id is not None and bid != node_id:
                raise _Fail(Errors.INVALID_REQUEST,
                            f"Unexpected broker id, expected {node_id}, but received {c.resource_name}")
        for n, op, v in c.ops:
            if op in (APPEND, SUBTRACT) and (BROKER_CONFIGS.get(n) is None or BROKER_CONFIGS[n].type != "list"):
                raise _Fail(Errors.INVALID_CONFIG, f"Config value {_OP_NAMES[op].lower()} is not allowed for config key: {n}")
            try:
                validate_broker_change(n, v if op == SET else None)
            except ValueError as e:
                raise _Fail(Errors.INVALID_REQUEST, str(e)) from None
    elif c.resource_type != TOPIC_RESOURCE:
        raise _Fail(Errors.INVALID_REQUEST, f"Unknown resource type {c.resource_type}")


def _list_default(resource_type: int, name: str) -> str:
    if resource_type == TOPIC_RESOURCE:
        return TOPIC_CONFIGS[name][1] or "" if name in TOPIC_CONFIGS else ""
    d = BROKER_CONFIGS.get(name)
    return ",".join(d.default) if d is not None and d.default else ""


def new_config_set(current: dict[str, str], c: Change) -> dict[str, str | None]:
    """The keys ``c`` changes -> their new values (None: removed), Kafka's incremental rules:
    APPEND adds the values not yet present, SUBTRACT removes them, both starting from the
    built-in default when the key is not set."""
    out: dict[str, str | None] = {}
    for name, op, value in c.ops:
        if op == SET:
            out[name] = value
        elif op == DELETE:
            out[name] = None
        else:
            if c.resource_type == TOPIC_RESOURCE and not is_list_config(name):
                raise _Fail(Errors.INVALID_CONFIG, f"Can't {_OP_NAMES[op]} to key {name} because its type is not LIST.")
            old = current.get(name)
            if old is None:
                old = _list_default(c.resource_type, name)
            parts = [p for p in old.split(",") if p]
            given = (value or "").split(",")
            if op == APPEND:
                parts += [p for p in dict.fromkeys(given) if p and p not in parts]
            else:
                parts = [p for p in parts if p not in given]
            out[name] = ",".join(parts)
    if c.replace:
        for name in current:
            if name not in out:
                out[name] = None
    return out


def alter_op(changes: list[Change], validate_only: bool, topic_base: LogConfig):
    """The controller operation: ``(controller, now_ms) -> ControllerResult(records, [(code,
    message)] per change)``. ``topic_base``: the broker's topic defaults, for the checks that
    span several configs (min vs max compaction lag)."""
    def op(ctl, now_ms: int) -> ControllerResult:
        records: list = []
        results: list = []
        for c in changes:
            try:
                updates = _checked_updates(ctl, c, topic_base)
            except _Fail as f:
                results.append((f.code, f.message))
                continue
            results.append((Errors.NONE, None))
            if updates and not validate_only:
                records += ctl.alter_configs(c.resource_type, c.resource_name, updates, now_ms).records
        return ControllerResult(records, results)
    return op


def _checked_updates(ctl, c: Change, topic_base: LogConfig) -> dict[str, str | None]:
    image = ctl.image
    current = dict(image.configs.get((c.resource_type, c.resource_name), {}))
    updates = new_config_set(current, c)
    if c.resource_type == TOPIC_RESOURCE:
        if not c.resource_name:
            raise _Fail(Errors.INVALID_REQUEST, "Default topic resources are not allowed.")
        err = validate_topic_name(c.resource_name)
        if err:
            raise _Fail(Errors.INVALID_TOPIC_EXCEPTION, err)
        final = {**current, **updates}
        final = {k: v for k, v in final.items() if v is not None}
        try:
            validate_topic_configs(final, base=topic_base)
        except InvalidConfigError as e:
            raise _Fail(Errors.INVALID_CONFIG, str(e)) from None
        if c.resource_name not in image.topics_by_name:
            raise _Fail(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{c.resource_name}' does not exist.")
        # unchanged keys need no record
        return {k: v for k, v in updates.items() if current.get(k) != v}
    if c.resource_name and int(c.resource_name) not in image.brokers:
        raise _Fail(Errors.BROKER_ID_NOT_REGISTERED, f"No node with id {c.resource_name} found.")
    # Kafka writes broker records even when unchanged, so brokers reload (KAFKA-14136);
    # deleting a key that is not set changes nothing.
    return {k: v for k, v in updates.items() if v is not None or k in current}


def apply_broker_defaults(broker) -> None:
    """After broker-level configs changed: recompute the topic defaults from every config layer
    and hand each hosted partition its new effective config."""
    broker.default_log_config = BrokerLayers.of(broker.config, broker.image).topic_defaults()
    replicas = broker.replicas
    if replicas is None:
        return
    for p in replicas.all_partitions():
        p.set_config(broker.log_config_for(p.topic))


async def alter(broker, changes: list[Change], validate_only: bool) -> list[tuple[int, str | None]]:
    """Preprocess, run the controller operation, apply committed broker-level changes; the
    (error code, message) of each change, in request order."""
    # the controller takes any broker's configs (forwarded by that broker, which checked the id)
    results = preprocess(changes, None if getattr(broker, "on_controller", False) else broker.node_id)
    todo = [c for c, r in zip(changes, results) if r is None]
    if todo:
        done = iter(await broker.controller.submit(alter_op(todo, validate_only, broker.default_log_config)))
        results = [next(done) if r is None else r for r in results]
        if not validate_only and any(c.resource_type == BROKER_RESOURCE for c in todo):
            apply_broker_defaults(broker)
    return results
