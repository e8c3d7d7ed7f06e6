"""Kafka's metadata.version levels by release name (Kafka's MetadataVersion), for
``kbroker format --release-version`` (kafka-storage.sh's flag).

A release given without its "-IVn" suffix means that release's last level ("3.7" is
3.7-IV4). kbroker serves every level it accepts the same way: the level is recorded and
reported (DescribeFeatures, ApiVersions' finalized features), not used to turn features off.
"""

from __future__ import annotations

# level -> Kafka's name, from 3.0-IV1 (the first KRaft level) to the newest kbroker supports
NAMES = {
    1: "3.0-IV1", 2: "3.1-IV0", 3: "3.2-IV0", 4: "3.3-IV0", 5: "3.3-IV1", 6: "3.3-IV2",
    7: "3.3-IV3", 8: "3.4-IV0", 9: "3.5-IV0", 10: "3.5-IV1", 11: "3.5-IV2", 12: "3.6-IV0",
    13: "3.6-IV1", 14: "3.6-IV2", 15: "3.7-IV0", 16: "3.7-IV1", 17: "3.7-IV2", 18: "3.7-IV3",
    19: "3.7-IV4", 20: "3.8-IV0", 21: "3.9-IV0",
}
# levels Kafka knows but kbroker does not serve yet (4.0's)
NEWER = {22: "4.0-IV0", 23: "4.0-IV1", 24: "4.0-IV2", 25: "4.0-IV3"}
MINIMUM_BOOTSTRAP = 4       # 3.3-IV0: the oldest level a new cluster may start at (Kafka's rule)
FIRST_WITH_SCRAM = 11       # 3.5-IV2


class ReleaseVersionError(ValueError):
    pass


def _by_name() -> dict[str, int]:
    out: dict[str, int] = {}
    for level, name in sorted({**NAMES, **NEWER}.items()):
        out[name] = level
        out[name.split("-")[0]] = level          # the release alone: its last level
    return out


def level_of(release: str, latest: int) -> int:
    """The metadata.version level for ``release`` ("3.7", "3.7-IV2"), or ReleaseVersionError
    with the reason Kafka's format gives (or ours, for a level beyond ``latest``)."""
    by_name = _by_name()
    parts = release.split(".")
    key = release if len(parts) <= 2 else ".".join(parts[:2])   # "3.7.1" means 3.7
    level = by_name.get(key)
    if level is None:
        known = ", ".join(sorted({n.split("-")[0] for n in NAMES.values()}, key=lambda v: tuple(map(int, v.split(".")))))
        raise ReleaseVersionError(f"Unknown release version '{release}'. Supported versions are: "
                                  f"{NAMES[MINIMUM_BOOTSTRAP]} to {NAMES[latest]} ({known})")
    if level < MINIMUM_BOOTSTRAP:
        raise ReleaseVersionError(f"metadata.version {NAMES[level]} is too old to be supported.")
    if level > latest:
        raise ReleaseVersionError(f"metadata.version {name_of(level)} is not supported by kbroker; "
                                  f"the newest it serves is {NAMES[latest]}.")
    return level


def name_of(level: int) -> str:
    return NAMES.get(level) or NEWER.get(level) or f"level {level}"
