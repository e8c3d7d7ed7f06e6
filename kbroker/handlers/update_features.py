"""UpdateFeatures (57), versions 0-2: finalize feature levels (``kafka-features.sh upgrade``,
Admin.updateFeatures). Runs on the active controller (brokers forward it there); the rules
are kbroker.kraft.feature_control's. v0 carries allow_downgrade instead of an upgrade type;
v2 answers with the top-level error only."""

from __future__ import annotations

from kbroker.kraft.feature_control import SAFE_DOWNGRADE, UPGRADE, FeatureUpdate
from kbroker.wire.generated.update_features_response import UpdateFeaturesResponse

API_KEY = 57
MIN_VERSION = 0
MAX_VERSION = 2

_Result = UpdateFeaturesResponse.UpdatableFeatureResult


def _updates(req, version: int) -> list[FeatureUpdate]:
    if version == 0:
        return [FeatureUpdate(u.feature, u.max_version_level, SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE)
                for u in req.feature_updates]
    return [FeatureUpdate(u.feature, u.max_version_level, u.upgrade_type) for u in req.feature_updates]


async def _update(ctx, req):
    v = ctx.api_version
    updates = _updates(req, v)
    validate_only = v >= 1 and req.validate_only
    res = await ctx.broker.controller.submit(lambda c, now: c.update_features(updates, validate_only, now))
    # (as Kafka's controller: the request fails or succeeds as a whole; the top-level error
    # says why, and the v0-1 per-feature results repeat it)
    return UpdateFeaturesResponse(
        throttle_time_ms=0, error_code=res.error_code, error_message=res.error_message,
        results=[_Result(feature=u.name, error_code=res.error_code, error_message=res.error_message)
                 for u in updates])


def handle(ctx, req):
    return _update(ctx, req)
