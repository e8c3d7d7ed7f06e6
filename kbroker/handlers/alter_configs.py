"""AlterConfigs (33), versions 0-2: the legacy API, which replaces a resource's whole set of
dynamic configs (keys it does not list are removed). Topic and broker resources, through the
controller (``kbroker.broker.config_changes``)."""

from __future__ import annotations

from kbroker.broker.config_changes import SET, Change, alter
from kbroker.wire.generated.alter_configs_response import AlterConfigsResponse

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

_Resp = AlterConfigsResponse.AlterConfigsResourceResponse


async def _alter(ctx, req):
    changes = [Change(r.resource_type, r.resource_name, [(c.name, SET, c.value) for c in r.configs], replace=True)
               for r in req.resources]
    results = await alter(ctx.broker, changes, req.validate_only)
    return AlterConfigsResponse(throttle_time_ms=0, responses=[
        _Resp(error_code=code, error_message=msg, resource_type=c.resource_type, resource_name=c.resource_name)
        for c, (code, msg) in zip(changes, results)])


def handle(ctx, req):
    return _alter(ctx, req)
