"""ApiVersions (18): the supported version ranges, from the handler registry."""

from __future__ import annotations

from kbroker.kraft.controller import METADATA_VERSION, METADATA_VERSION_FEATURE
from kbroker.wire.generated.api_versions_response import ApiVersionsResponse

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4

UNSUPPORTED_VERSION = 35


def api_keys(specs) -> list:
    return [ApiVersionsResponse.ApiVersion(api_key=s.api_key, min_version=s.min_version, max_version=s.max_version)
            for s in sorted(specs.values(), key=lambda s: s.api_key)]


def unsupported_version_response(specs) -> ApiVersionsResponse:
    """What Kafka answers to an ApiVersions version it does not know: v0, error 35, our ranges."""
    return ApiVersionsResponse(error_code=UNSUPPORTED_VERSION, api_keys=api_keys(specs))


def handle(ctx, request):
    broker = ctx.broker
    cached = broker.api_versions_cache
    image = broker.image
    key = (ctx.api_version, image.offset)
    resp = cached.get(key)
    if resp is None:
        level = image.features.get(METADATA_VERSION_FEATURE, 0)
        resp = ApiVersionsResponse(
            error_code=0,
            api_keys=api_keys(broker.api_specs),
            supported_features=[ApiVersionsResponse.SupportedFeatureKey(
                name=METADATA_VERSION_FEATURE, min_version=1, max_version=METADATA_VERSION)],
            finalized_features_epoch=image.offset if level else -1,
            finalized_features=[ApiVersionsResponse.FinalizedFeatureKey(
                name=METADATA_VERSION_FEATURE, max_version_level=level, min_version_level=level)] if level else [],
        )
        cached.clear()
        cached[key] = resp
    return resp
