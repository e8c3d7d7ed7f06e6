"""AlterClientQuotas (49): client quotas by user / client-id / ip (with defaults) into the
metadata log as ClientQuotaRecord (ALTER_CONFIGS on the cluster). Enforcement:
kbroker.security.quotas / throttling."""

from __future__ import annotations

from kbroker.security.acls import ALTER_CONFIGS, CLUSTER_NAME, R_CLUSTER
from kbroker.security.controller_ops import alter_client_quotas
from kbroker.wire.errors import Errors
from kbroker.wire.generated.alter_client_quotas_response import AlterClientQuotasResponse as R

API_KEY = 49
MIN_VERSION = 0
MAX_VERSION = 1


def _entity(e):
    return [R.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in e]


async def _alter(ctx, entries, validate_only):
    out = await ctx.broker.controller.submit(alter_client_quotas(entries, validate_only))
    return R(entries=[R.EntryData(error_code=o.error, error_message=o.message, entity=_entity(e))
                      for (e, _), o in zip(entries, out)])


def handle(ctx, req):
    entries = [([(x.entity_type, x.entity_name) for x in e.entity], [(o.key, o.value, o.remove) for o in e.ops])
               for e in req.entries]
    if not ctx.authorize(ALTER_CONFIGS, R_CLUSTER, CLUSTER_NAME):
        return R(entries=[R.EntryData(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, error_message=None, entity=_entity(e))
                          for e, _ in entries])
    return _alter(ctx, entries, req.validate_only)
