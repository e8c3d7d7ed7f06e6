"""``kbroker metadata-quorum`` (kafka-metadata-quorum.sh):

    kbroker metadata-quorum --bootstrap-server H:P describe --status
    kbroker metadata-quorum --bootstrap-controller H:P describe --replication
    kbroker metadata-quorum --bootstrap-controller H:P add-controller --command-config server.properties
    kbroker metadata-quorum --bootstrap-controller H:P remove-controller --controller-id 3 --controller-directory-id DIR

``describe --status`` prints Kafka's fields (ClusterId, LeaderId, LeaderEpoch, HighWatermark,
MaxFollowerLag, MaxFollowerLagTimeMs, CurrentVoters, CurrentObservers); ``--replication`` its
table (NodeId, DirectoryId, LogEndOffset, Lag, LastFetchTimestamp, LastCaughtUpTimestamp,
Status). A broker forwards DescribeQuorum to the active controller; a controller listener
answers from the Raft leader. add-controller reads the new controller's own properties (its
node.id, metadata log directory id and controller listener) and asks the leader to add it.
"""

from __future__ import annotations

import asyncio
import json
import sys

from kbroker.net.client import ClientError, KafkaClient
from kbroker.wire import registry as wire

DESCRIBE_QUORUM, DESCRIBE_CLUSTER, ADD_RAFT_VOTER, REMOVE_RAFT_VOTER = 55, 60, 80, 81
ZERO_DIR = "AAAAAAAAAAAAAAAAAAAAAA"


def add_parser(sub) -> None:
    p = sub.add_parser("metadata-quorum", help="describe and change the metadata quorum (like kafka-metadata-quorum.sh)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--bootstrap-server", metavar="HOST:PORT")
    g.add_argument("--bootstrap-controller", metavar="HOST:PORT")
    p.add_argument("--command-config", help="client properties (security.protocol, sasl.*, ssl.truststore.location "
                                            "as PEM); add-controller: also the new controller's own properties")
    ops = p.add_subparsers(dest="op", required=True)
    d = ops.add_parser("describe")
    w = d.add_mutually_exclusive_group(required=True)
    w.add_argument("--status", action="store_true")
    w.add_argument("--replication", action="store_true")
    d.add_argument("--human-readable", action="store_true")
    ops.add_parser("add-controller")
    r = ops.add_parser("remove-controller")
    r.add_argument("--controller-id", type=int, required=True)
    r.add_argument("--controller-directory-id", required=True)
    p.set_defaults(tool_main=main)


def _addresses(args) -> list[tuple]:
    """(host, port, ssl context, SASL credentials) of each bootstrap address; TLS/SASL from
    --command-config when it has client security settings (``security.protocol`` ...)."""
    ssl = sasl = None
    if args.command_config:
        from kbroker.config import parse_properties
        from kbroker.security.client_auth import from_client_properties
        with open(args.command_config, encoding="utf-8") as f:
            props = parse_properties(f.read())
        if "security.protocol" in props:
            ssl, sasl = from_client_properties(props)
    out = []
    for s in (args.bootstrap_server or args.bootstrap_controller).split(","):
        h, _, port = s.strip().rpartition(":")
        out.append((h.strip("[]") or "localhost", int(port), ssl, sasl))
    return out


async def _ask(addrs, request, timeout_ms: int = 10000):
    last = None
    for h, p, ssl, sasl in addrs:
        c = KafkaClient(h, p, client_id="kbroker-metadata-quorum", request_timeout_ms=timeout_ms, ssl=ssl, sasl=sasl)
        try:
            return await c.send(request)
        except ClientError as e:
            last = e
        finally:
            await c.close()
    raise ConnectionError(str(last))


def _describe_request():
    R = wire.REQUESTS[DESCRIBE_QUORUM]
    return R(topics=[R.TopicData(topic_name="__cluster_metadata", partitions=[R.TopicData.PartitionData(partition_index=0)])])


def _dir(u) -> str:
    from kbroker.broker.storage import uuid_to_str
    return uuid_to_str(u) if u is not None else ZERO_DIR


def status_lines(resp, cluster_id: str | None) -> list[str]:
    part = resp.topics[0].partitions[0]
    leader_leo = next((v.log_end_offset for v in part.current_voters if v.replica_id == part.leader_id), part.high_watermark)
    lead_fetch = next((v.last_caught_up_timestamp for v in part.current_voters if v.replica_id == part.leader_id), 0)
    followers = [v for v in part.current_voters + part.observers if v.replica_id != part.leader_id]
    max_lag = max((leader_leo - v.log_end_offset for v in followers), default=0)
    max_lag_ms = max((lead_fetch - v.last_caught_up_timestamp for v in followers if v.last_caught_up_timestamp >= 0), default=0)
    nodes = {n.node_id: [f"{l.name}://{l.host}:{l.port}" for l in n.listeners] for n in (resp.nodes or [])}

    def voter(v):
        d = {"id": v.replica_id, "directoryId": _dir(getattr(v, "replica_directory_id", None))}
        if v.replica_id in nodes:
            d["endpoints"] = nodes[v.replica_id]
        return d
    return [
        f"ClusterId:              {cluster_id or ''}",
        f"LeaderId:               {part.leader_id}",
        f"LeaderEpoch:            {part.leader_epoch}",
        f"HighWatermark:          {part.high_watermark}",
        f"MaxFollowerLag:         {max_lag}",
        f"MaxFollowerLagTimeMs:   {max(0, max_lag_ms)}",
        f"CurrentVoters:          {json.dumps([voter(v) for v in part.current_voters], separators=(', ', ': '))}",
        f"CurrentObservers:       {json.dumps([voter(v) for v in part.observers], separators=(', ', ': '))}",
    ]


def replication_rows(resp) -> list[list[str]]:
    part = resp.topics[0].partitions[0]
    leader_leo = next((v.log_end_offset for v in part.current_voters if v.replica_id == part.leader_id), part.high_watermark)
    rows = [["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]]
    ordered = sorted(part.current_voters, key=lambda v: v.replica_id != part.leader_id)
    for kind, reps in (("voter", ordered), ("observer", part.observers)):
        for v in reps:
            status = "Leader" if v.replica_id == part.leader_id else ("Follower" if kind == "voter" else "Observer")
            rows.append([str(v.replica_id), _dir(getattr(v, "replica_directory_id", None)), str(v.log_end_offset),
                         str(max(0, leader_leo - v.log_end_offset)), str(v.last_fetch_timestamp),
                         str(v.last_caught_up_timestamp), status])
    return rows


async def _main(args) -> int:
    addrs = _addresses(args)
    if args.op == "describe":
        resp = await _ask(addrs, _describe_request())
        part = resp.topics[0].partitions[0] if resp.topics else None
        if resp.error_code or part is None or part.error_code:
            code = resp.error_code or (part.error_code if part else -1)
            print(f"Error while executing describe: error code {code} {resp.error_message or ''}", file=sys.stderr)
            return 1
        if args.status:
            cid = None
            if args.bootstrap_server:
                R = wire.REQUESTS[DESCRIBE_CLUSTER]
                try:
                    cid = (await _ask(addrs, R())).cluster_id
                except (ConnectionError, ClientError):
                    pass
            print("\n".join(status_lines(resp, cid)))
        else:
            rows = replication_rows(resp)
            widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
            for r in rows:
                print("\t".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        return 0
    if args.op == "add-controller":
        return await _add_controller(args, addrs)
    R = wire.REQUESTS[REMOVE_RAFT_VOTER]
    from kbroker.broker.storage import str_to_uuid
    resp = await _ask(addrs, R(cluster_id=None, voter_id=args.controller_id,
                               voter_directory_id=str_to_uuid(args.controller_directory_id)))
    if resp.error_code:
        print(f"Error while executing remove-controller: error code {resp.error_code} {resp.error_message or ''}", file=sys.stderr)
        return 1
    print(f"Removed KRaft controller {args.controller_id} with directory id {args.controller_directory_id}")
    return 0


async def _add_controller(args, addrs) -> int:
    from kbroker.broker.storage import read_meta, str_to_uuid
    from kbroker.config import BrokerConfig
    if not args.command_config:
        print("add-controller needs --command-config: the new controller's properties", file=sys.stderr)
        return 1
    cfg = BrokerConfig.load(args.command_config)
    meta = read_meta(cfg.metadata_log_dir)
    if meta is None:
        print(f"{cfg.metadata_log_dir} is not formatted", file=sys.stderr)
        return 1
    names = cfg.controller_listener_names
    R = wire.REQUESTS[ADD_RAFT_VOTER]
    listeners = [R.Listener(name=e.listener_name, host=e.host or "localhost", port=e.port)
                 for e in cfg.listeners if e.listener_name in names]
    resp = await _ask(addrs, R(cluster_id=meta.get("cluster.id"), timeout_ms=30000, voter_id=cfg.node_id,
                               voter_directory_id=str_to_uuid(meta["directory.id"]), listeners=listeners),
                      timeout_ms=40000)
    if resp.error_code:
        print(f"Error while executing add-controller: error code {resp.error_code} {resp.error_message or ''}", file=sys.stderr)
        return 1
    print(f"Added KRaft controller {cfg.node_id} with directory id {meta['directory.id']} and endpoints: "
          + ", ".join(f"{l.name}://{l.host}:{l.port}" for l in listeners))
    return 0


def main(args) -> int:
    try:
        return asyncio.run(_main(args))
    except (ConnectionError, OSError) as e:
        print(f"Error: cannot reach {args.bootstrap_server or args.bootstrap_controller}: {e}", file=sys.stderr)
        return 1
