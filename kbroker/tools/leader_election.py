"""``kbroker leader-election`` (kafka-leader-election.sh): ElectLeaders, preferred or unclean,
for one partition, a topic's partitions, a JSON file of partitions, or every partition."""

from __future__ import annotations

import json

from kbroker.tools.client import KafkaError
from kbroker.tools.common import client, run
from kbroker.wire.errors import Errors, error_name
from kbroker.wire.generated.elect_leaders_request import ElectLeadersRequest

TYPES = {"PREFERRED": 0, "UNCLEAN": 1}


def add_parser(sub) -> None:
    p = sub.add_parser("leader-election", help="elect preferred or unclean leaders (like kafka-leader-election.sh)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    p.add_argument("--admin.config", dest="admin_config", help="client properties file (accepted)")
    p.add_argument("--election-type", required=True, type=str.upper, choices=sorted(TYPES))
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument("--all-topic-partitions", action="store_true")
    p.add_argument("--path-to-json-file", help='{"partitions": [{"topic": "t", "partition": 0}, ...]}')
    p.set_defaults(tool_main=lambda args: run(_main, args))


def _targets(args):
    """[(topic, [partition])] or None (every partition)."""
    chosen = [bool(args.topic), args.all_topic_partitions, bool(args.path_to_json_file)]
    if sum(chosen) != 1:
        raise SystemExit("One and only one of the following options is required: "
                         "--topic, --all-topic-partitions, --path-to-json-file")
    if args.partition is not None and not args.topic:
        raise SystemExit("--partition requires --topic")
    if args.all_topic_partitions:
        return None
    if args.path_to_json_file:
        with open(args.path_to_json_file) as f:
            doc = json.load(f)
        out: dict[str, list[int]] = {}
        for e in doc.get("partitions", []):
            out.setdefault(e["topic"], []).append(int(e["partition"]))
        return list(out.items())
    return [(args.topic, [args.partition] if args.partition is not None else None)]


def _main(args) -> int:
    election = TYPES[args.election_type]
    with client(args) as c:
        targets = _targets(args)
        if targets is not None:   # a topic without --partition: all of its partitions
            targets = [(t, ps if ps is not None else sorted(c.partitions(t))) for t, ps in targets]
        T = ElectLeadersRequest.TopicPartitions
        req = ElectLeadersRequest(election_type=election, timeout_ms=int(c.timeout * 1000),
                                  topic_partitions=None if targets is None else
                                  [T(topic=t, partitions=ps) for t, ps in targets])
        resp = c.call(req, 2)
        if resp.error_code:
            raise KafkaError(resp.error_code, f"ElectLeaders: {error_name(resp.error_code)}")
    done, noop, failed = [], [], []
    for t in resp.replica_election_results:
        for p in t.partition_result:
            name = f"{t.topic}-{p.partition_id}"
            if p.error_code == Errors.NONE:
                done.append(name)
            elif p.error_code == Errors.ELECTION_NOT_NEEDED:
                noop.append(name)
            else:
                failed.append((name, p.error_code, p.error_message))
    if done:
        print(f"Successfully completed leader election ({args.election_type}) for partitions {', '.join(done)}")
    if noop:
        print(f"Valid replica already elected for partitions {', '.join(noop)}")
    for name, code, msg in failed:
        print(f"Error completing leader election ({args.election_type}) for partition: {name}: "
              f"{error_name(code)}" + (f": {msg}" if msg else ""))
    if failed:
        raise KafkaError(failed[0][1], f"{len(failed)} replica(s) could not be elected")
    return 0
