"""``kbroker groups ...``: what kafka-consumer-groups.sh does, over the Kafka protocol.

    kbroker groups list
    kbroker groups describe GROUP
    kbroker groups reset-offsets GROUP --topic T[:P,P] (--to-earliest | --to-latest |
        --to-datetime ISO | --shift-by N | --to-offset N) [--execute]      (dry run by default)
    kbroker groups delete GROUP [GROUP ...]

All take ``--bootstrap-server HOST:PORT`` (default 127.0.0.1:9092).
"""
from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from kbroker.groups.admin_client import EARLIEST, LATEST, AdminClient, KafkaError
from kbroker.groups.consumer_protocol_bytes import decode_assignment

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def add_parser(sub) -> None:
    """Register ``groups`` on the top-level ``kbroker`` subparsers."""
    g = sub.add_parser("groups", help="list, describe, reset offsets of, delete consumer groups")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help=f"HOST:PORT (default {DEFAULT_BOOTSTRAP})")
    gs = g.add_subparsers(dest="groups_command", required=True)
    gs.add_parser("list", parents=[common], help="list groups with their state and type")
    d = gs.add_parser("describe", parents=[common], help="members, assignments, offsets and lag")
    d.add_argument("group")
    r = gs.add_parser("reset-offsets", parents=[common], help="move a group's committed offsets (dry run by default)")
    r.add_argument("group")
    r.add_argument("--topic", required=True, action="append", help="TOPIC or TOPIC:P1,P2 (repeatable)")
    how = r.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true")
    how.add_argument("--to-latest", action="store_true")
    how.add_argument("--to-datetime", metavar="ISO", help="e.g. 2024-05-01T12:00:00.000 (UTC unless an offset is given)")
    how.add_argument("--shift-by", type=int, metavar="N")
    how.add_argument("--to-offset", type=int, metavar="N")
    r.add_argument("--execute", action="store_true", help="commit the new offsets (default: only print them)")
    x = gs.add_parser("delete", parents=[common], help="delete empty groups and their offsets")
    x.add_argument("group", nargs="+")


def main(args) -> int:
    try:
        with AdminClient(args.bootstrap_server) as client:
            return {"list": _list, "describe": _describe, "reset-offsets": _reset,
                    "delete": _delete}[args.groups_command](client, args)
    except (KafkaError, OSError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1


def _table(rows: list[list], out=sys.stdout) -> None:
    if not rows:
        return
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip(), file=out)


def _list(client: AdminClient, args) -> int:
    rows = [["GROUP", "TYPE", "PROTOCOL-TYPE", "STATE"]]
    for g in client.list_groups():
        rows.append([g.group_id, g.group_type or "-", g.protocol_type or "-", g.group_state or "-"])
    _table(rows)
    return 0


def _describe(client: AdminClient, args) -> int:
    gid = args.group
    desc = client.describe_group(gid)
    if desc.group_state == "Dead":
        print(f"Consumer group '{gid}' does not exist.", file=sys.stderr)
        return 1
    owners: dict[tuple[str, int], object] = {}
    for m in desc.members:
        for topic, parts in decode_assignment(bytes(m.member_assignment)).items():
            for p in parts:
                owners[(topic, p)] = m
    committed = client.committed(gid)
    tps = sorted(set(committed) | set(owners))
    ends: dict[str, dict[int, int]] = {}
    for topic in sorted({t for t, _ in tps}):
        try:
            ends[topic] = client.list_offsets(topic, LATEST)
        except KafkaError:
            ends[topic] = {}
    print(f"GROUP {gid}  STATE {desc.group_state}  PROTOCOL {desc.protocol_type or '-'}/{desc.protocol_data or '-'}"
          f"  MEMBERS {len(desc.members)}\n")
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]]
    for t, p in tps:
        cur = committed.get((t, p), (None, None))[0]
        end = ends.get(t, {}).get(p)
        lag = end - cur if cur is not None and end is not None else "-"
        m = owners.get((t, p))
        rows.append([gid, t, p, "-" if cur is None else cur, "-" if end is None else end, lag,
                     m.member_id if m else "-", m.client_host if m else "-", m.client_id if m else "-"])
    _table(rows)
    if desc.members:
        print()
        mrows = [["CONSUMER-ID", "INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]]
        for m in desc.members:
            a = decode_assignment(bytes(m.member_assignment))
            mrows.append([m.member_id, m.group_instance_id or "-", m.client_host, m.client_id,
                          sum(len(v) for v in a.values()),
                          ",".join(f"{t}:{'/'.join(map(str, sorted(ps)))}" for t, ps in sorted(a.items())) or "-"])
        _table(mrows)
    return 0


def _parse_datetime(s: str) -> int:
    text = s.strip().replace("Z", "+00:00")
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def _reset(client: AdminClient, args) -> int:
    gid = args.group
    desc = client.describe_group(gid)
    if args.execute and desc.group_state not in ("Empty", "Dead"):
        print(f"Error: Assignments can only be reset if the group '{gid}' is inactive, but the current state is "
              f"{desc.group_state}.", file=sys.stderr)
        return 1
    committed = client.committed(gid)
    new: dict[tuple[str, int], int] = {}
    for spec in args.topic:
        topic, _, plist = spec.partition(":")
        parts = [int(p) for p in plist.split(",")] if plist else None
        earliest = client.list_offsets(topic, EARLIEST, parts)
        latest = client.list_offsets(topic, LATEST, parts)
        for p in sorted(latest):
            lo, hi = earliest.get(p, 0), latest[p]
            if args.to_earliest:
                off = lo
            elif args.to_latest:
                off = hi
            elif args.to_datetime is not None:
                found = client.list_offsets(topic, _parse_datetime(args.to_datetime), [p]).get(p, -1)
                off = hi if found < 0 else found
            elif args.shift_by is not None:
                cur = committed.get((topic, p), (lo, None))[0]
                off = cur + args.shift_by
            else:
                off = args.to_offset
            new[(topic, p)] = min(max(off, lo), hi)
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] + [[gid, t, p, o] for (t, p), o in sorted(new.items())]
    _table(rows)
    if not args.execute:
        print("\n(dry run: add --execute to commit these offsets)")
        return 0
    errs = {tp: c for tp, c in client.commit(gid, new).items() if c}
    if errs:
        print(f"Error: commit failed for {errs}", file=sys.stderr)
        return 1
    return 0


def _delete(client: AdminClient, args) -> int:
    rc = 0
    for gid in args.group:
        code = client.delete_group(gid)
        if code == 0:
            print(f"Deletion of requested consumer group ('{gid}') was successful.")
        else:
            names = {68: "NON_EMPTY_GROUP: the group is not empty", 69: "GROUP_ID_NOT_FOUND: the group does not exist"}
            print(f"Error: deletion of group '{gid}' failed: {names.get(code, f'error code {code}')}", file=sys.stderr)
            rc = 1
    return rc
