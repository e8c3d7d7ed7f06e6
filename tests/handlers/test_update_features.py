"""UpdateFeatures (57): metadata.version upgrades commit a FeatureLevelRecord that ApiVersions'
finalized features then show; invalid updates fail the whole request with Kafka's
INVALID_UPDATE_VERSION and change nothing."""
from kbroker.kraft.controller import METADATA_VERSION, ControllerResult
from kbroker.kraft.feature_control import SAFE_DOWNGRADE, UNSAFE_DOWNGRADE, UPGRADE
from kbroker.kraft.records import TYPE_BY_NAME, record_class
from kbroker.wire.errors import Errors
from kbroker.wire.generated.api_versions_request import ApiVersionsRequest
from kbroker.wire.generated.update_features_request import UpdateFeaturesRequest

MV = "metadata.version"
Key = UpdateFeaturesRequest.FeatureUpdateKey


def _update(h, version, *updates, validate_only=False):
    keys = [Key(feature=n, max_version_level=lvl, upgrade_type=t, allow_downgrade=t != UPGRADE)
            for n, lvl, t in updates]
    return h.call(57, version, UpdateFeaturesRequest(timeout_ms=1000, feature_updates=keys,
                                                     validate_only=validate_only))


def _finalized(h):
    r = h.call(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    return {f.name: (f.min_version_level, f.max_version_level) for f in r.finalized_features}, r.finalized_features_epoch


def test_upgrade_commits_and_invalid_updates_change_nothing(broker):
    h = broker
    assert _finalized(h)[0] == {MV: (METADATA_VERSION, METADATA_VERSION)}
    # a cluster formatted at an older metadata.version
    rec = record_class(TYPE_BY_NAME["FeatureLevelRecord"])(name=MV, feature_level=METADATA_VERSION - 1)
    h.server.controller.submit_now(lambda c, t: ControllerResult([rec], None))
    before, epoch = _finalized(h)
    assert before == {MV: (METADATA_VERSION - 1,) * 2}

    refused = [
        ((MV, METADATA_VERSION + 1, UPGRADE),), ("only supports versions",),   # beyond what we support
        (("no.such.feature", 1, UPGRADE),), ("does not support the given feature",),
        ((MV, METADATA_VERSION - 2, UPGRADE),), ("without setting the upgrade type",),
        ((MV, METADATA_VERSION - 2, SAFE_DOWNGRADE),), ("downgrades are not supported",),
        ((MV, METADATA_VERSION - 2, UNSAFE_DOWNGRADE),), ("downgrades are not supported",),
        ((MV, METADATA_VERSION, SAFE_DOWNGRADE),), ("newer version",),
        ((MV, 0, UNSAFE_DOWNGRADE),), ("cannot be deleted",),
        ((MV, -1, UPGRADE),), ("less than 0",),
        # all or nothing: the valid upgrade beside an invalid one is not applied either
        ((MV, METADATA_VERSION, UPGRADE), ("no.such.feature", 1, UPGRADE)), ("does not support",),
    ]
    for updates, (text,) in zip(refused[::2], refused[1::2]):
        r = _update(h, 1, *updates)
        assert r.error_code == Errors.INVALID_UPDATE_VERSION and text in r.error_message, (updates, r)
        assert [x.error_code for x in r.results] == [Errors.INVALID_UPDATE_VERSION] * len(updates)
    assert _update(h, 2, (MV, METADATA_VERSION + 1, UPGRADE)).error_code == Errors.INVALID_UPDATE_VERSION
    assert _update(h, 0, (MV, METADATA_VERSION - 2, SAFE_DOWNGRADE)).error_code == Errors.INVALID_UPDATE_VERSION
    assert _finalized(h) == (before, epoch)

    r = _update(h, 1, (MV, METADATA_VERSION, UPGRADE), validate_only=True)
    assert r.error_code == 0 and _finalized(h) == (before, epoch)
    r = _update(h, 2, (MV, METADATA_VERSION, UPGRADE))
    assert r.error_code == 0 and r.error_message is None
    after, epoch2 = _finalized(h)
    assert after == {MV: (METADATA_VERSION, METADATA_VERSION)} and epoch2 > epoch
    assert h.server.image.features[MV] == METADATA_VERSION
    # the same level again is accepted and writes nothing
    assert _update(h, 0, (MV, METADATA_VERSION, UPGRADE)).error_code == 0
    assert _finalized(h) == (after, epoch2)
