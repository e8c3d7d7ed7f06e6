"""Server-side partition assignors for consumer groups: ``uniform`` (sticky, balanced) and
``range`` (contiguous ranges per topic, co-partitioning friendly)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class MemberSpec:
    topics: set                       # subscribed topic ids
    current: dict = field(default_factory=dict)   # topic id -> set of partitions (previous target)


Topics = dict[Any, int]               # topic id -> partition count
AssignmentMap = dict[str, dict[Any, set[int]]]


def uniform(members: dict[str, MemberSpec], topics: Topics) -> AssignmentMap:
    """Balance partition counts across members, keeping partitions where they are when that
    does not unbalance anyone.

    Partitions are placed most-constrained first (fewest eligible members), each to its
    previous owner if that owner is still under its share, else to the least-loaded eligible
    member (ties: member id), so heterogeneous subscriptions come out balanced too.
    """
    out: AssignmentMap = {m: {} for m in members}
    if not members:
        return out
    eligible: dict[Any, list[str]] = {
        t: sorted(m for m, spec in members.items() if t in spec.topics) for t in topics}
    # Each member's fair share: the sum over its topics of partitions / eligible members.
    share = {m: 0.0 for m in members}
    for t, n in topics.items():
        for m in eligible[t]:
            share[m] += n / len(eligible[t])
    limit = {m: int(-(-share[m] // 1)) for m in members}       # ceil
    load = {m: 0 for m in members}
    partitions = sorted(((t, p) for t, n in topics.items() if eligible[t] for p in range(n)),
                        key=lambda tp: (len(eligible[tp[0]]), str(tp[0]), tp[1]))
    previous = {(t, p): m for m, spec in members.items() for t, ps in spec.current.items() for p in ps}
    # First pass: sticky, within share (floor first so extra slots go to whoever keeps most).
    floor = {m: int(share[m] // 1) for m in members}
    leftovers = []
    for t, p in partitions:
        owner = previous.get((t, p))
        if owner in members and t in members[owner].topics and load[owner] < floor[owner]:
            out[owner].setdefault(t, set()).add(p)
            load[owner] += 1
        else:
            leftovers.append((t, p))
    rest = []
    for t, p in leftovers:
        owner = previous.get((t, p))
        if owner in members and t in members[owner].topics and load[owner] < limit[owner] and \
                _least_load(eligible[t], load) >= load[owner]:
            out[owner].setdefault(t, set()).add(p)
            load[owner] += 1
        else:
            rest.append((t, p))
    for t, p in rest:
        m = min(eligible[t], key=lambda x: (load[x] - limit[x] >= 0, load[x], x))
        out[m].setdefault(t, set()).add(p)
        load[m] += 1
    return out


def _least_load(candidates: list[str], load: dict[str, int]) -> int:
    return min(load[c] for c in candidates)


def range_(members: dict[str, MemberSpec], topics: Topics) -> AssignmentMap:
    """Per topic, subscribed members in id order take contiguous ranges; the first
    ``n % members`` get one extra partition."""
    out: AssignmentMap = {m: {} for m in members}
    for t, n in topics.items():
        subs = sorted(m for m, spec in members.items() if t in spec.topics)
        if not subs:
            continue
        per, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            count = per + (1 if i < extra else 0)
            if count:
                out[m][t] = set(range(start, start + count))
            start += count
    return out


ASSIGNORS: dict[str, Callable[[dict[str, MemberSpec], Topics], AssignmentMap]] = {
    "uniform": uniform,
    "range": range_,
}
