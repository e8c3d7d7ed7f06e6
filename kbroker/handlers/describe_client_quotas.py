"""DescribeClientQuotas (48): the stored client quotas matching the filter components
(DESCRIBE_CONFIGS on the cluster). Match types: 0 exact name, 1 the default entity, 2 any."""

from __future__ import annotations

from kbroker.security.acls import CLUSTER_NAME, DESCRIBE_CONFIGS, R_CLUSTER
from kbroker.wire.errors import Errors
from kbroker.wire.generated.describe_client_quotas_response import DescribeClientQuotasResponse as R

API_KEY = 48
MIN_VERSION = 0
MAX_VERSION = 1

EXACT, DEFAULT, ANY = 0, 1, 2


def matches(entity: dict, components, strict: bool) -> bool:
    for c in components:
        if c.entity_type not in entity:
            return False
        name = entity[c.entity_type]
        if c.match_type == EXACT and name != c.match:
            return False
        if c.match_type == DEFAULT and name is not None:
            return False
    return not strict or set(entity) == {c.entity_type for c in components}


def handle(ctx, req):
    if not ctx.authorize(DESCRIBE_CONFIGS, R_CLUSTER, CLUSTER_NAME):
        return R(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, error_message=None, entries=None)
    types = [c.entity_type for c in req.components]
    if len(set(types)) != len(types) or any(c.match_type not in (EXACT, DEFAULT, ANY) for c in req.components):
        return R(error_code=Errors.INVALID_REQUEST, error_message="Invalid quota filter", entries=None)
    out = []
    for key, values in sorted(ctx.broker.image.security.quotas.items(), key=lambda kv: str(kv[0])):
        if matches(dict(key), req.components, req.strict):
            out.append(R.EntryData(entity=[R.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in key],
                                   values=[R.EntryData.ValueData(key=k, value=v) for k, v in sorted(values.items())]))
    return R(error_code=0, error_message=None, entries=out)
