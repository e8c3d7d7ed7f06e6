"""DescribeAcls (29): the ACLs matching a filter (DESCRIBE on the cluster)."""

from __future__ import annotations

from kbroker.security.acls import CLUSTER_NAME, DESCRIBE, R_CLUSTER, AclFilter
from kbroker.wire.errors import Errors
from kbroker.wire.generated.describe_acls_response import DescribeAclsResponse as R

API_KEY = 29
MIN_VERSION = 0
MAX_VERSION = 3


def handle(ctx, req):
    sec = ctx.broker.security
    if sec is None or sec.authorizer is None:
        return R(error_code=Errors.SECURITY_DISABLED, error_message="No Authorizer is configured.", resources=[])
    if not ctx.authorize(DESCRIBE, R_CLUSTER, CLUSTER_NAME):
        return R(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, error_message=None, resources=[])
    f = AclFilter(req.resource_type_filter, req.resource_name_filter, req.pattern_type_filter,
                  req.principal_filter, req.host_filter, req.operation, req.permission_type)
    if f.is_unknown():
        return R(error_code=Errors.INVALID_REQUEST, error_message="Invalid filter", resources=[])
    grouped: dict[tuple, list] = {}
    for a in ctx.broker.image.security.acls.by_id.values():
        if f.matches(a):
            grouped.setdefault((a.resource_type, a.resource_name, a.pattern_type), []).append(
                R.DescribeAclsResource.AclDescription(principal=a.principal, host=a.host, operation=a.operation,
                                                      permission_type=a.permission))
    return R(error_code=0, error_message=None, resources=[
        R.DescribeAclsResource(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
        for (t, n, p), acls in grouped.items()])
