"""``kbroker groups ...``: what kafka-consumer-groups.sh does, over the Kafka protocol.

    kbroker groups list [--state [S,S]] [--type [T,T]]
    kbroker groups describe (GROUP | --group G ... | --all-groups) [--offsets | --members | --state] [--verbose]
    kbroker groups reset-offsets (GROUP | --group G ... | --all-groups)
        (--topic T[:P,P] ... | --all-topics | --from-file CSV)
        (--to-earliest | --to-latest | --to-current | --to-datetime ISO | --by-duration PnDTnHnMnS |
         --shift-by N | --to-offset N | --from-file CSV) [--execute | --dry-run] [--export]
    kbroker groups delete GROUP [GROUP ...]

All take ``--bootstrap-server HOST:PORT`` (default 127.0.0.1:9092). Output columns follow
kafka-consumer-groups.sh; ``--export`` writes its CSV (``topic,partition,offset`` for one
group, ``group,topic,partition,offset`` for several), which ``--from-file`` reads back.
KIP-848 (consumer protocol) groups are described with ConsumerGroupDescribe, so member epochs
and target assignments show with ``--members --verbose``.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from kbroker.groups.admin_client import EARLIEST, LATEST, AdminClient, KafkaError
from kbroker.groups.consumer_protocol_bytes import decode_assignment

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
GROUP_ID_NOT_FOUND = 69
MISSING = "-"


def add_parser(sub) -> None:
    """Register ``groups`` on the top-level ``kbroker`` subparsers."""
    g = sub.add_parser("groups", help="list, describe, reset offsets of, delete consumer groups")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help=f"HOST:PORT (default {DEFAULT_BOOTSTRAP})")
    which = argparse.ArgumentParser(add_help=False)
    which.add_argument("group", nargs="?", help="the group (same as --group)")
    which.add_argument("--group", dest="groups", action="append", default=[], metavar="GROUP", help="repeatable")
    which.add_argument("--all-groups", action="store_true", help="every group the cluster knows")
    gs = g.add_subparsers(dest="groups_command", required=True)

    ls = gs.add_parser("list", parents=[common], help="list groups with their type and state")
    ls.add_argument("--state", nargs="?", const="", metavar="S1,S2", help="only groups in these states (e.g. Stable,Empty)")
    ls.add_argument("--type", nargs="?", const="", metavar="T1,T2", help="only groups of these types (classic, consumer)")

    d = gs.add_parser("describe", parents=[common, which], help="offsets and lag, members, or state of groups")
    view = d.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="committed offsets, log end and lag (the default)")
    view.add_argument("--members", action="store_true", help="members and how many partitions each has")
    view.add_argument("--state", action="store_true", help="coordinator, assignor, state, member count")
    d.add_argument("--verbose", action="store_true", help="with --members: assignments (and epochs/targets "
                   "for consumer-protocol groups); with --state: group and assignment epochs")

    r = gs.add_parser("reset-offsets", parents=[common, which], help="move committed offsets (dry run by default)")
    scope = r.add_mutually_exclusive_group()
    scope.add_argument("--topic", action="append", help="TOPIC or TOPIC:P1,P2 (repeatable)")
    scope.add_argument("--all-topics", action="store_true", help="every partition the group has offsets for")
    how = r.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true")
    how.add_argument("--to-latest", action="store_true")
    how.add_argument("--to-current", action="store_true", help="the committed offset (log end where none)")
    how.add_argument("--to-datetime", metavar="ISO", help="e.g. 2024-05-01T12:00:00.000 (UTC unless an offset is given)")
    how.add_argument("--by-duration", metavar="PnDTnHnMnS", help="the offset of (now - duration), e.g. PT1H30M")
    how.add_argument("--shift-by", type=int, metavar="N")
    how.add_argument("--to-offset", type=int, metavar="N")
    how.add_argument("--from-file", metavar="CSV", help="a plan written by --export")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true", help="only show them (the default)")
    r.add_argument("--export", action="store_true", help="print the plan as CSV")

    x = gs.add_parser("delete", parents=[common], help="delete empty groups and their offsets")
    x.add_argument("group", nargs="+")


def main(args) -> int:
    try:
        with AdminClient(args.bootstrap_server) as client:
            return {"list": _list, "describe": _describe, "reset-offsets": _reset,
                    "delete": _delete}[args.groups_command](client, args)
    except (KafkaError, OSError, ValueError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1


def _table(rows: list[list], out=None) -> None:
    out = out or sys.stdout
    if not rows:
        return
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip(), file=out)


def _csv_list(s: str | None) -> list[str]:
    return [x.strip() for x in (s or "").split(",") if x.strip()]


# ----------------------------------------------------------------------------------------------
# list

def _list(client: AdminClient, args) -> int:
    states = _csv_list(args.state)
    types = [t.lower() for t in _csv_list(args.type)]
    bad = [t for t in types if t not in ("classic", "consumer")]
    if bad:
        raise ValueError(f"Invalid types list '{args.type}'. Valid types are: classic, consumer")
    rows = [["GROUP", "TYPE", "PROTOCOL-TYPE", "STATE"]]
    for g in client.list_groups(states, types):
        rows.append([g.group_id, g.group_type or MISSING, g.protocol_type or MISSING, g.group_state or MISSING])
    _table(rows)
    return 0


# ----------------------------------------------------------------------------------------------
# describe

@dataclass
class MemberView:
    member_id: str
    instance_id: str | None
    host: str
    client_id: str
    assignment: dict[str, list[int]]
    epoch: int | None = None                       # consumer-protocol members only
    target: dict[str, list[int]] | None = None


@dataclass
class GroupView:
    group_id: str
    kind: str                                      # "consumer" (KIP-848) or "classic"
    state: str
    assignor: str
    coordinator: tuple[int, str, int]
    members: list[MemberView] = field(default_factory=list)
    group_epoch: int | None = None
    assignment_epoch: int | None = None


def _group_ids(client: AdminClient, args) -> list[str]:
    ids = ([args.group] if args.group else []) + list(args.groups)
    if args.all_groups:
        ids += [g.group_id for g in client.list_groups()]
    if not ids:
        raise ValueError("name a group, or use --group or --all-groups")
    return list(dict.fromkeys(ids))


def _by_topic(tps) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in tps:
        out.setdefault(tp.topic_name, []).extend(tp.partitions)
    return {t: sorted(ps) for t, ps in out.items()}


def group_view(client: AdminClient, gid: str) -> GroupView | None:
    """The group as kafka-consumer-groups.sh shows it: ConsumerGroupDescribe for KIP-848
    groups, DescribeGroups for classic ones. None if the group does not exist."""
    coord = client.coordinator_node(gid)
    cg = client.describe_consumer_group(gid)
    if cg.error_code == 0:
        members = [MemberView(m.member_id, m.instance_id, m.client_host, m.client_id,
                              _by_topic(m.assignment.topic_partitions), m.member_epoch,
                              _by_topic(m.target_assignment.topic_partitions)) for m in cg.members]
        return GroupView(gid, "consumer", cg.group_state, cg.assignor_name, coord, members,
                         cg.group_epoch, cg.assignment_epoch)
    try:
        desc = client.describe_group(gid)
    except KafkaError as e:
        if e.code == GROUP_ID_NOT_FOUND:
            return None
        raise
    if desc.group_state == "Dead":
        return None
    members = [MemberView(m.member_id, m.group_instance_id, m.client_host, m.client_id,
                          decode_assignment(bytes(m.member_assignment)) if desc.protocol_type == "consumer" else {})
               for m in desc.members]
    return GroupView(gid, "classic", desc.group_state, desc.protocol_data or "", coord, members)


def _warn_state(v: GroupView) -> None:
    if v.state == "Empty":
        print(f"\nConsumer group '{v.group_id}' has no active members.", file=sys.stderr)
    elif v.state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
        print(f"\nWarning: Consumer group '{v.group_id}' is rebalancing.", file=sys.stderr)


def _describe(client: AdminClient, args) -> int:
    rc = 0
    for gid in _group_ids(client, args):
        v = group_view(client, gid)
        if v is None:
            print(f"Error: Consumer group '{gid}' does not exist.", file=sys.stderr)
            rc = 1
            continue
        _warn_state(v)
        if args.state:
            _print_state(v, args.verbose)
        elif args.members:
            _print_members(v, args.verbose)
        else:
            _print_offsets(client, v)
        print()
    return rc


def _print_offsets(client: AdminClient, v: GroupView) -> None:
    owners = {(t, p): m for m in v.members for t, ps in m.assignment.items() for p in ps}
    committed = client.committed(v.group_id)
    tps = sorted(set(committed) | set(owners))
    ends: dict[str, dict[int, int]] = {}
    for topic in sorted({t for t, _ in tps}):
        try:
            ends[topic] = client.list_offsets(topic, LATEST)
        except KafkaError:
            ends[topic] = {}
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]]
    for t, p in tps:
        cur = committed.get((t, p), (None, None))[0]
        end = ends.get(t, {}).get(p)
        lag = end - cur if cur is not None and end is not None else MISSING
        m = owners.get((t, p))
        rows.append([v.group_id, t, p, MISSING if cur is None else cur, MISSING if end is None else end, lag,
                     m.member_id if m else MISSING, m.host if m else MISSING, m.client_id if m else MISSING])
    for m in v.members:                     # members without partitions still show up
        if not m.assignment:
            rows.append([v.group_id, MISSING, MISSING, MISSING, MISSING, MISSING, m.member_id, m.host, m.client_id])
    _table(rows)


def _fmt_assignment(a: dict[str, list[int]] | None) -> str:
    if not a:
        return MISSING
    return ", ".join(f"{t}:({','.join(map(str, sorted(ps)))})" for t, ps in sorted(a.items()))


def _print_members(v: GroupView, verbose: bool) -> None:
    with_instance = any(m.instance_id for m in v.members)
    head = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + ["HOST", "CLIENT-ID", "#PARTITIONS"]
    if verbose:
        head += ["EPOCH", "ASSIGNMENT", "TARGET-ASSIGNMENT"] if v.kind == "consumer" else ["ASSIGNMENT"]
    rows = [head]
    for m in v.members:
        row = [v.group_id, m.member_id] + ([m.instance_id or MISSING] if with_instance else []) + \
              [m.host, m.client_id, sum(len(ps) for ps in m.assignment.values())]
        if verbose:
            row += [m.epoch, _fmt_assignment(m.assignment), _fmt_assignment(m.target)] if v.kind == "consumer" \
                else [_fmt_assignment(m.assignment)]
        rows.append(row)
    _table(rows)


def _print_state(v: GroupView, verbose: bool) -> None:
    node, host, port = v.coordinator
    head = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    row = [v.group_id, f"{host}:{port} ({node})", v.assignor or MISSING, v.state, len(v.members)]
    if verbose and v.kind == "consumer":
        head += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
        row += [v.group_epoch, v.assignment_epoch]
    _table([head, row])


# ----------------------------------------------------------------------------------------------
# reset-offsets

_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?=[-+\d])(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                       r"(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """java.time.Duration.parse's format, PnDTnHnMn.nS (days, hours, minutes, seconds)."""
    m = _DURATION.fullmatch(text.strip())
    if not m or not any(m.group(i) for i in range(2, 6)):
        raise ValueError(f"'{text}' is not a duration (format PnDTnHnMnS, e.g. PT1H30M or P1DT2H)")
    sign, days, hours, minutes, seconds, frac = m.groups()
    ms = (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)) * 1000
    if frac:
        part = int((frac + "000")[:3])
        ms += -part if (seconds or "").startswith("-") else part
    return -ms if sign == "-" else ms


def _parse_datetime(s: str) -> int:
    text = s.strip().replace("Z", "+00:00")
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def _read_plan(path: str, groups: list[str]) -> dict[str, dict[tuple[str, int], int]]:
    """CSV from --export: topic,partition,offset (one group) or group,topic,partition,offset."""
    plan: dict[str, dict[tuple[str, int], int]] = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            cells = [c.strip() for c in line.strip().split(",")]
            if cells == [""]:
                continue
            if len(cells) == 3 and len(groups) == 1:
                g, (t, p, o) = groups[0], cells
            elif len(cells) == 4:
                g, t, p, o = cells
            else:
                raise ValueError(f"{path}:{n}: expected topic,partition,offset or group,topic,partition,offset")
            plan.setdefault(g, {})[(t, int(p))] = int(o)
    return plan


class _Offsets:
    """Log offsets per topic, fetched once."""

    def __init__(self, client: AdminClient):
        self.client = client
        self.cache: dict[tuple[str, int], dict[int, int]] = {}

    def get(self, topic: str, spec: int) -> dict[int, int]:
        if (topic, spec) not in self.cache:
            self.cache[(topic, spec)] = self.client.list_offsets(topic, spec)
        return self.cache[(topic, spec)]


def _partitions(client: AdminClient, args, committed, plan) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(committed)
    if args.topic:
        out = []
        for spec in args.topic:
            topic, _, plist = spec.partition(":")
            parts = [int(p) for p in plist.split(",")] if plist else sorted(client.partitions(topic))
            out += [(topic, p) for p in parts]
        return out
    if plan is not None:
        return sorted(plan)
    raise ValueError("One of the reset scopes should be defined: --all-topics, --topic.")


def _plan_group(client: AdminClient, args, gid: str, offsets: _Offsets, file_plan) -> dict[tuple[str, int], int]:
    committed = {tp: off for tp, (off, _) in client.committed(gid).items()}
    plan = None
    if file_plan is not None:
        plan = file_plan.get(gid)
        if plan is None:
            raise ValueError(f"No reset plan for group {gid} found")
    tps = _partitions(client, args, committed, plan)
    new: dict[tuple[str, int], int] = {}
    stamp = None
    if args.to_datetime is not None:
        stamp = _parse_datetime(args.to_datetime)
    elif args.by_duration is not None:
        stamp = int(time.time() * 1000) - parse_duration_ms(args.by_duration)
    for t, p in tps:
        lo, hi = offsets.get(t, EARLIEST).get(p), offsets.get(t, LATEST).get(p)
        if lo is None or hi is None:
            raise ValueError(f"partition {t}-{p} does not exist")
        clamp = True
        if args.to_earliest:
            off, clamp = lo, False
        elif args.to_latest:
            off, clamp = hi, False
        elif args.to_current:
            off, clamp = committed.get((t, p), hi), False
        elif stamp is not None:
            found = client.list_offsets(t, stamp, [p]).get(p, -1)
            off, clamp = (hi if found < 0 else found), False
        elif args.shift_by is not None:
            if (t, p) not in committed:
                raise ValueError(f"Cannot shift offset for partition {t}-{p} since there is no current committed offset")
            off = committed[(t, p)] + args.shift_by
        elif args.to_offset is not None:
            off = args.to_offset
        else:
            off = plan[(t, p)]
        new[(t, p)] = min(max(off, lo), hi) if clamp else off
    return new


def _reset(client: AdminClient, args) -> int:
    groups = _group_ids(client, args)
    file_plan = _read_plan(args.from_file, groups) if args.from_file else None
    offsets = _Offsets(client)
    plans: dict[str, dict[tuple[str, int], int]] = {}
    rc = 0
    for gid in groups:
        v = group_view(client, gid)
        state = v.state if v is not None else "Dead"
        if state not in ("Empty", "Dead"):
            print(f"Error: Assignments can only be reset if the group '{gid}' is inactive, but the current state is "
                  f"{state}.", file=sys.stderr)
            rc = 1
            continue
        plans[gid] = _plan_group(client, args, gid, offsets, file_plan)
        if args.execute:
            errs = {tp: c for tp, c in client.commit(gid, plans[gid]).items() if c}
            if errs:
                print(f"Error: committing offsets of group '{gid}' failed: {errs}", file=sys.stderr)
                rc = 1
    if args.export:
        single = len(groups) == 1
        for gid, plan in plans.items():
            for (t, p), o in sorted(plan.items()):
                print(f"{t},{p},{o}" if single else f"{gid},{t},{p},{o}")
    elif plans:
        _table([["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] +
               [[gid, t, p, o] for gid, plan in plans.items() for (t, p), o in sorted(plan.items())])
    if not args.execute and plans:
        print("\n(dry run: add --execute to commit these offsets)", file=sys.stderr if args.export else sys.stdout)
    return rc


# ----------------------------------------------------------------------------------------------
# delete

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
