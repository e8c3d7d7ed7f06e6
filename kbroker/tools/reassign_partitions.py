"""``kbroker reassign-partitions`` (kafka-reassign-partitions.sh): --generate a plan for moving
topics onto a broker list, --execute a plan (AlterPartitionReassignments), --verify it,
--cancel it, --list the reassignments in progress. Plans are Kafka's JSON:
``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}]}``.

``--execute --throttle B`` limits the copying to B bytes/s as Kafka's tool does: the moving
brokers get ``leader/follower.replication.throttled.rate``, the topics the replicas that send
(``leader.replication.throttled.replicas``) and receive (``follower...``); ``--verify`` clears
all of them once no reassignment is left (unless ``--preserve-throttles``)."""

from __future__ import annotations

import json

from kbroker.replication.throttle import (FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE, LEADER_REPLICAS,
                                         RATE_CONFIGS, REPLICAS_CONFIGS)
from kbroker.tools.client import BROKER_RESOURCE, TOPIC_RESOURCE, KafkaError
from kbroker.tools.common import client, run
from kbroker.wire.errors import Errors, error_name
from kbroker.wire.generated.alter_partition_reassignments_request import AlterPartitionReassignmentsRequest
from kbroker.wire.generated.list_partition_reassignments_request import ListPartitionReassignmentsRequest


def add_parser(sub) -> None:
    p = sub.add_parser("reassign-partitions", help="move partitions between brokers (like kafka-reassign-partitions.sh)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    p.add_argument("--command-config", help="client properties file (accepted)")
    act = p.add_mutually_exclusive_group(required=True)
    for a in ("generate", "execute", "verify", "cancel", "list"):
        act.add_argument(f"--{a}", action="store_true")
    p.add_argument("--reassignment-json-file")
    p.add_argument("--topics-to-move-json-file")
    p.add_argument("--broker-list", help="brokers to place the topics on (--generate), e.g. 1,2,3")
    p.add_argument("--disable-rack-aware", action="store_true")
    p.add_argument("--additional", action="store_true", help="(accepted)")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="--verify: keep the throttles after the reassignments complete")
    p.add_argument("--throttle", type=int, default=-1,
                   help="--execute: limit the replication of the moving replicas to this many bytes/s")
    p.add_argument("--replica-alter-log-dirs-throttle", type=int, default=-1, help="(accepted)")
    p.add_argument("--timeout", type=int, default=10000)
    p.set_defaults(tool_main=lambda args: run(_main, args))


def _dumps(partitions) -> str:
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def _plan(path: str) -> list[tuple[str, int, list[int]]]:
    with open(path) as f:
        doc = json.load(f)
    out = []
    for e in doc.get("partitions", []):
        if e.get("log_dirs") and any(d != "any" for d in e["log_dirs"]):
            raise SystemExit("kbroker places replicas in its own log dirs: log_dirs must be \"any\"")
        out.append((e["topic"], int(e["partition"]), [int(r) for r in e["replicas"]]))
    if not out:
        raise SystemExit("Partition reassignment list cannot be empty")
    return out


def _current(c, topics) -> dict[tuple[str, int], list[int]]:
    md = c.topics(sorted(set(topics)))
    out = {}
    for name in topics:
        t = md.get(name)
        if t is None or t.error_code:
            raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} not found")
        for p in t.partitions:
            out[(name, p.partition_index)] = list(p.replica_nodes)
    return out


def _assignment_json(current, keys) -> str:
    return _dumps([{"topic": t, "partition": p, "replicas": current[(t, p)],
                    "log_dirs": ["any"] * len(current[(t, p)])} for t, p in keys])


def _main(args) -> int:
    with client(args) as c:
        if args.list:
            return _list(c)
        if args.generate:
            return _generate(c, args)
        if not args.reassignment_json_file:
            raise SystemExit("Missing required argument \"[reassignment-json-file]\"")
        plan = _plan(args.reassignment_json_file)
        if args.execute:
            return _execute(c, plan, args.throttle)
        if args.verify:
            return _verify(c, plan, args.preserve_throttles)
        return _cancel(c, plan)


def _alter(c, items) -> list[tuple[str, int, int, str | None]]:
    """AlterPartitionReassignments; [(topic, partition, error, message)]."""
    by_topic: dict[str, list] = {}
    R = AlterPartitionReassignmentsRequest.ReassignableTopic
    for t, p, reps in items:
        by_topic.setdefault(t, []).append(R.ReassignablePartition(partition_index=p, replicas=reps))
    req = AlterPartitionReassignmentsRequest(timeout_ms=int(c.timeout * 1000), topics=[
        R(name=t, partitions=ps) for t, ps in by_topic.items()])
    resp = c.call(req, 0)
    if resp.error_code:
        raise KafkaError(resp.error_code, f"AlterPartitionReassignments: {error_name(resp.error_code)} "
                                          f"{resp.error_message or ''}".strip())
    return [(t.name, p.partition_index, p.error_code, p.error_message) for t in resp.responses for p in t.partitions]


def ongoing_reassignments(c, keys=None) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    T = ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics
    topics = None
    if keys is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in keys:
            by_topic.setdefault(t, []).append(p)
        topics = [T(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
    resp = c.call(ListPartitionReassignmentsRequest(timeout_ms=int(c.timeout * 1000), topics=topics), 0)
    if resp.error_code:
        raise KafkaError(resp.error_code, f"ListPartitionReassignments: {error_name(resp.error_code)}")
    return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in resp.topics for p in t.partitions}


def _fail_on(results, what: str) -> None:
    bad = [(f"{t}-{p}", code, msg) for t, p, code, msg in results if code]
    if bad:
        for name, code, msg in bad:
            print(f"Error {what} {name}: {error_name(code)}" + (f": {msg}" if msg else ""))
        raise KafkaError(bad[0][1], f"{what}: {len(bad)} partition(s) failed")


def _execute(c, plan, throttle: int = -1) -> int:
    keys = [(t, p) for t, p, _ in plan]
    current = _current(c, {t for t, _ in keys})
    missing = [f"{t}-{p}" for t, p in keys if (t, p) not in current]
    if missing:
        raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition(s): {', '.join(missing)}")
    print("Current partition replica assignment\n")
    print(_assignment_json(current, keys))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    if throttle >= 0:
        print("Warning: You must run --verify periodically, until the reassignment completes, "
              "to ensure the throttle is removed.")
        _set_throttles(c, plan, current, throttle)
    results = _alter(c, plan)
    _fail_on(results, "reassigning")
    names = ",".join(f"{t}-{p}" for t, p in keys)
    print(f"Successfully started partition reassignment{'s' if len(keys) > 1 else ''} for {names}")
    return 0


def _moves(c, plan, current) -> dict[str, dict[int, tuple[set[int], set[int]]]]:
    """topic -> partition -> (sources, destinations): the plan's moves and the reassignments
    already running in its topics (a topic's throttle lists are set whole)."""
    topics = {t for t, _, _ in plan}
    out: dict[str, dict[int, tuple[set[int], set[int]]]] = {}
    for (t, p), (reps, adding, _removing) in ongoing_reassignments(c).items():
        if t in topics:
            out.setdefault(t, {})[p] = (set(reps) - set(adding), set(adding))
    for t, p, target in plan:
        running = out.get(t, {}).get(p)
        sources = running[0] if running is not None else set(current[(t, p)])
        out.setdefault(t, {})[p] = (sources, set(target) - sources)
    return out


def _set_throttles(c, plan, current, rate: int) -> None:
    moves = _moves(c, plan, current)
    for t, parts in moves.items():
        leader = sorted({f"{p}:{b}" for p, (src, _) in parts.items() for b in src})
        follower = sorted({f"{p}:{b}" for p, (src, dst) in parts.items() for b in dst if b not in src})
        c.alter_configs(TOPIC_RESOURCE, t, {LEADER_REPLICAS: ",".join(leader),
                                            FOLLOWER_REPLICAS: ",".join(follower)}, [])
    brokers = sorted({b for parts in moves.values() for src, dst in parts.values() for b in src | dst})
    for b in brokers:
        c.alter_configs(BROKER_RESOURCE, str(b), {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)}, [])
    print(f"The inter-broker throttle limit was set to {rate} B/s")


def _clear_throttles(c, plan) -> None:
    live = {b.node_id for b in c.metadata(None).brokers}
    brokers = sorted(live | {b for _, _, target in plan for b in target})
    print(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
          + ",".join(map(str, brokers)))
    for b in sorted(live):
        c.alter_configs(BROKER_RESOURCE, str(b), {}, list(RATE_CONFIGS))
    topics = list(dict.fromkeys(t for t, _, _ in plan))
    print(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} {','.join(topics)}")
    for t in topics:
        c.alter_configs(TOPIC_RESOURCE, t, {}, list(REPLICAS_CONFIGS))


def _verify(c, plan, preserve_throttles: bool = False) -> int:
    keys = [(t, p) for t, p, _ in plan]
    ongoing = ongoing_reassignments(c)     # all of them: the throttles stay while any runs
    current = _current(c, {t for t, _ in keys})
    print("Status of partition reassignment:")
    for t, p, target in plan:
        name = f"{t}-{p}"
        if (t, p) in ongoing:
            print(f"Reassignment of partition {name} is still in progress.")
        elif current.get((t, p)) == target:
            print(f"Reassignment of partition {name} is completed.")
        else:
            print(f"There is no active reassignment of partition {name}, but replica set is "
                  f"{current.get((t, p))} rather than {target}.")
    if not preserve_throttles and not ongoing:
        # every throttle goes: the brokers that sent before cannot be told apart any more
        _clear_throttles(c, plan)
    return 0


def _cancel(c, plan) -> int:
    results = _alter(c, [(t, p, None) for t, p, _ in plan])
    done = [f"{t}-{p}" for t, p, code, _ in results if code == 0]
    idle = Errors.NO_REASSIGNMENT_IN_PROGRESS
    not_running = [f"{t}-{p}" for t, p, code, _ in results if code == idle]
    _fail_on([r for r in results if r[2] not in (0, idle)], "cancelling")
    if done:
        print(f"Successfully cancelled partition reassignment{'s' if len(done) > 1 else ''} for: {','.join(done)}")
    if not_running:
        print(f"None of the specified partition reassignments are active: {','.join(not_running)}")
    return 0


def _list(c) -> int:
    ongoing = ongoing_reassignments(c)
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for (t, p), (reps, adding, removing) in sorted(ongoing.items()):
        print(f"{t}-{p}: replicas: {','.join(map(str, reps))}. adding: {','.join(map(str, adding))}. "
              f"removing: {','.join(map(str, removing))}.")
    return 0


def _generate(c, args) -> int:
    from kbroker.kraft.partition_change import place_replicas
    if not args.topics_to_move_json_file or not args.broker_list:
        raise SystemExit("--generate needs --topics-to-move-json-file and --broker-list")
    with open(args.topics_to_move_json_file) as f:
        topics = [e["topic"] for e in json.load(f).get("topics", [])]
    wanted = [int(b) for b in args.broker_list.split(",") if b.strip()]
    md = c.metadata(None)
    racks = {b.node_id: (None if args.disable_rack_aware else b.rack) for b in md.brokers}
    unknown = [b for b in wanted if b not in racks]
    if unknown:
        raise KafkaError(Errors.BROKER_NOT_AVAILABLE, f"Unknown broker id(s): {','.join(map(str, unknown))}")
    current = _current(c, topics)
    keys = sorted(current)
    proposed = {}
    for t in topics:
        parts = sorted(p for tt, p in keys if tt == t)
        rf = len(current[(t, parts[0])]) if parts else 0
        try:
            placed = place_replicas([(b, racks[b]) for b in wanted], len(parts), rf)
        except ValueError as e:
            raise KafkaError(Errors.INVALID_REPLICATION_FACTOR, str(e)) from None
        for p, reps in zip(parts, placed):
            proposed[(t, p)] = reps
    print("Current partition replica assignment")
    print(_assignment_json(current, keys))
    print("\nProposed partition reassignment configuration")
    print(_assignment_json(proposed, keys))
    return 0
