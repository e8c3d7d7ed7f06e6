"""CreateAcls (30): ACL bindings into the metadata log (ALTER on the cluster)."""

from __future__ import annotations

from kbroker.security.acls import ALTER, CLUSTER_NAME, R_CLUSTER, Acl
from kbroker.security.controller_ops import create_acls
from kbroker.wire.errors import Errors
from kbroker.wire.generated.create_acls_response import CreateAclsResponse as R

API_KEY = 30
MIN_VERSION = 0
MAX_VERSION = 3


async def _create(ctx, bindings):
    out = await ctx.broker.controller.submit(create_acls(bindings))
    return R(results=[R.AclCreationResult(error_code=o.error, error_message=o.message) for o in out])


def handle(ctx, req):
    if ctx.broker.security is None or ctx.broker.security.authorizer is None:
        return R(results=[R.AclCreationResult(error_code=Errors.SECURITY_DISABLED,
                                              error_message="No Authorizer is configured.") for _ in req.creations])
    if not ctx.authorize(ALTER, R_CLUSTER, CLUSTER_NAME):
        return R(results=[R.AclCreationResult(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, error_message=None)
                          for _ in req.creations])
    bindings = [Acl(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                    c.operation, c.permission_type) for c in req.creations]
    return _create(ctx, bindings)
