"""``kbroker topics`` (kafka-topics.sh): --create, --list, --describe (leader, replicas, ISR),
--alter (partitions, configs), --delete, and the partition filters
(--under-replicated-partitions, --under-min-isr-partitions, --at-min-isr-partitions,
--unavailable-partitions)."""

from __future__ import annotations

import fnmatch
import re
import sys

from kbroker.tools.client import TOPIC_RESOURCE, KafkaError
from kbroker.tools.common import add_bootstrap, client, parse_kv, run
from kbroker.wire.errors import Errors

INTERNAL = ("__consumer_offsets", "__transaction_state", "__share_group_state")


def add_parser(sub) -> None:
    p = sub.add_parser("topics", help="create, list, describe, alter, delete topics (like kafka-topics.sh)")
    add_bootstrap(p)
    act = p.add_mutually_exclusive_group(required=True)
    for a in ("create", "list", "describe", "alter", "delete"):
        act.add_argument(f"--{a}", action="store_true")
    p.add_argument("--topic", help="topic name (a regular expression for --list/--describe/--delete)")
    p.add_argument("--partitions", type=int)
    p.add_argument("--replication-factor", type=int)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY")
    p.add_argument("--if-not-exists", action="store_true")
    p.add_argument("--if-exists", action="store_true")
    p.add_argument("--exclude-internal", action="store_true")
    p.add_argument("--topics-with-overrides", action="store_true")
    p.add_argument("--under-replicated-partitions", action="store_true")
    p.add_argument("--under-min-isr-partitions", action="store_true")
    p.add_argument("--at-min-isr-partitions", action="store_true")
    p.add_argument("--unavailable-partitions", action="store_true")
    p.set_defaults(tool_main=lambda args: run(_main, args))


def _matching(names, pattern: str | None, exclude_internal: bool) -> list[str]:
    out = []
    for n in sorted(names):
        if exclude_internal and n in INTERNAL:
            continue
        if pattern and not (n == pattern or re.fullmatch(pattern, n) or fnmatch.fnmatchcase(n, pattern)):
            continue
        out.append(n)
    return out


def _main(args) -> int:
    with client(args) as c:
        if args.create:
            return _create(c, args)
        if args.list:
            for n in _matching(c.topics().keys(), args.topic, args.exclude_internal):
                print(n)
            return 0
        if args.describe:
            return _describe(c, args)
        if args.alter:
            return _alter(c, args)
        return _delete(c, args)


def _create(c, args) -> int:
    if not args.topic:
        raise SystemExit("--topic is required with --create")
    try:
        c.create_topic(args.topic, args.partitions or -1, args.replication_factor or -1, parse_kv(args.config, None))
    except KafkaError as e:
        if e.code == Errors.TOPIC_ALREADY_EXISTS and args.if_not_exists:
            return 0
        raise
    print(f"Created topic {args.topic}.")
    return 0


def _names_or_fail(c, args) -> list[str]:
    names = _matching(c.topics().keys(), args.topic, args.exclude_internal)
    if args.topic and not names and not args.if_exists:
        raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{args.topic}' does not exist as expected")
    return names


def _min_isr(configs) -> int:
    for e in configs:
        if e.name == "min.insync.replicas" and e.value:
            return int(e.value)
    return 1


def _describe(c, args) -> int:
    names = _names_or_fail(c, args)
    topics = c.topics(names) if names else {}
    live = set(c.brokers)
    filtered = (args.under_replicated_partitions or args.under_min_isr_partitions
                or args.at_min_isr_partitions or args.unavailable_partitions)
    moving = _reassignments(c) if names else {}
    for name in names:
        t = topics[name]
        configs = c.describe_configs(TOPIC_RESOURCE, name, synonyms=False)
        overrides = [e for e in configs if e.config_source == 1]   # DYNAMIC_TOPIC_CONFIG
        if args.topics_with_overrides and not overrides:
            continue
        min_isr = _min_isr(configs)
        parts = sorted(t.partitions, key=lambda p: p.partition_index)
        rf = len(parts[0].replica_nodes) if parts else 0
        if not filtered:
            print(f"Topic: {name}\tTopicId: {_topic_id(t.topic_id)}\tPartitionCount: {len(parts)}\t"
                  f"ReplicationFactor: {rf}\tConfigs: {','.join(f'{e.name}={e.value}' for e in overrides)}")
        for p in parts:
            if args.under_replicated_partitions and not len(p.isr_nodes) < len(p.replica_nodes):
                continue
            if args.under_min_isr_partitions and not len(p.isr_nodes) < min_isr:
                continue
            if args.at_min_isr_partitions and not len(p.isr_nodes) == min_isr:
                continue
            if args.unavailable_partitions and p.leader_id in live:
                continue
            leader = p.leader_id if p.leader_id >= 0 else "none"
            r = moving.get((name, p.partition_index))
            reassigning = (f"Adding Replicas: {','.join(map(str, r[0]))}\tRemoving Replicas: "
                           f"{','.join(map(str, r[1]))}\t") if r else ""
            print(f"\tTopic: {name}\tPartition: {p.partition_index}\tLeader: {leader}\t"
                  f"Replicas: {','.join(map(str, p.replica_nodes))}\tIsr: {','.join(map(str, p.isr_nodes))}\t"
                  f"{reassigning}Elr: \tLastKnownElr: ")
    return 0


def _reassignments(c) -> dict:
    """(topic, partition) -> (adding, removing) of the reassignments in progress."""
    from kbroker.tools.reassign_partitions import ongoing_reassignments
    try:
        return {k: (adding, removing) for k, (_, adding, removing) in ongoing_reassignments(c).items()}
    except KafkaError:
        return {}   # (not allowed to list them: describe without)


def _topic_id(u) -> str:
    from kbroker.broker.storage import uuid_to_str
    return uuid_to_str(u)


def _alter(c, args) -> int:
    if not args.topic:
        raise SystemExit("--topic is required with --alter")
    names = _names_or_fail(c, args)
    for name in names:
        if args.partitions:
            c.create_partitions(name, args.partitions)
        if args.config or args.delete_config:
            c.alter_configs(TOPIC_RESOURCE, name, parse_kv(args.config, None), args.delete_config)
    return 0


def _delete(c, args) -> int:
    if not args.topic:
        raise SystemExit("--topic is required with --delete")
    for name in _names_or_fail(c, args):
        if name in INTERNAL:
            print(f"Topic {name} is an internal topic and cannot be deleted", file=sys.stderr)
            return 1
        c.delete_topic(name)
    return 0
