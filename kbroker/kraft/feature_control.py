"""Finalized feature levels (UpdateFeatures, KIP-584/778): which updates the active controller
accepts, and the FeatureLevelRecords that commit them (Kafka's FeatureControlManager).

The request is all or nothing, as in Kafka's KRaft controller: one invalid update fails the
whole request with INVALID_UPDATE_VERSION and nothing is written. Rules:
* only features this node supports, within its supported range;
* a lower level needs a downgrade upgrade type (v0: allow_downgrade), a higher one must not
  use one; metadata.version is never lowered (kbroker keeps no per-version metadata
  rewriting, so a "safe" downgrade could not be checked) nor deleted (level 0);
* an unchanged level is accepted and writes nothing.
"""

from __future__ import annotations

from typing import NamedTuple

from kbroker.kraft.controller import METADATA_VERSION_FEATURE
from kbroker.wire.errors import Errors

MIN_METADATA_VERSION = 1        # 3.0-IV1, the first KRaft metadata.version

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
_TYPE_NAMES = {UPGRADE: "upgrade", SAFE_DOWNGRADE: "safe downgrade", UNSAFE_DOWNGRADE: "unsafe downgrade"}


class FeatureUpdate(NamedTuple):
    name: str
    level: int
    upgrade_type: int = UPGRADE


class FeatureUpdateResult(NamedTuple):
    error_code: int
    error_message: str | None
    levels: dict[str, int]          # the levels to write (changed ones only), when accepted


def supported_features(max_metadata_version: int) -> dict[str, tuple[int, int]]:
    """feature -> (min, max) level this node supports."""
    return {METADATA_VERSION_FEATURE: (MIN_METADATA_VERSION, max_metadata_version)}


def _check(u: FeatureUpdate, current: int, supported: dict[str, tuple[int, int]]) -> str | None:
    """Why ``u`` is refused, or None."""
    prefix = f"Invalid update version {u.level} for feature {u.name}."
    if u.upgrade_type not in _TYPE_NAMES:
        return f"{prefix} Unknown upgrade type {u.upgrade_type}."
    rng = supported.get(u.name)
    if rng is None:
        return f"{prefix} The controller does not support the given feature."
    if u.level < 0:
        return f"{prefix} A feature version cannot be less than 0."
    if u.name == METADATA_VERSION_FEATURE and u.level == 0:
        return f"{prefix} The metadata.version feature cannot be deleted."
    if u.level != 0 and not rng[0] <= u.level <= rng[1]:
        return f"{prefix} The controller only supports versions {rng[0]}-{rng[1]}."
    if u.level < current:
        if u.upgrade_type == UPGRADE:
            return (f"{prefix} Can't downgrade the version of this feature without setting the "
                    f"upgrade type to either safe or unsafe downgrade.")
        if u.name == METADATA_VERSION_FEATURE:
            return f"{prefix} Refusing to perform the requested {_TYPE_NAMES[u.upgrade_type]}: " \
                   f"metadata.version downgrades are not supported."
    elif u.level > current and u.upgrade_type != UPGRADE:
        return f"{prefix} Can't downgrade to a newer version."
    return None


def validate_updates(updates: list[FeatureUpdate], finalized: dict[str, int],
                     supported: dict[str, tuple[int, int]]) -> FeatureUpdateResult:
    """Check every update against the finalized levels; all accepted or none."""
    if not updates:
        return FeatureUpdateResult(Errors.INVALID_REQUEST, "No feature updates were given.", {})
    names = [u.name for u in updates]
    if len(set(names)) != len(names):
        return FeatureUpdateResult(Errors.INVALID_REQUEST, "A feature was named more than once.", {})
    levels: dict[str, int] = {}
    for u in updates:
        why = _check(u, finalized.get(u.name, 0), supported)
        if why is not None:
            return FeatureUpdateResult(Errors.INVALID_UPDATE_VERSION, why, {})
        if u.level != finalized.get(u.name, 0):
            levels[u.name] = u.level
    return FeatureUpdateResult(0, None, levels)
