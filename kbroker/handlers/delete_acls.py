"""DeleteAcls (31): remove the ACLs matching each filter (ALTER on the cluster)."""

from __future__ import annotations

from kbroker.security.acls import ALTER, CLUSTER_NAME, R_CLUSTER, AclFilter
from kbroker.security.controller_ops import delete_acls
from kbroker.wire.errors import Errors
from kbroker.wire.generated.delete_acls_response import DeleteAclsResponse as R

API_KEY = 31
MIN_VERSION = 0
MAX_VERSION = 3

_Result = R.DeleteAclsFilterResult
_Match = _Result.DeleteAclsMatchingAcl


async def _delete(ctx, filters):
    out = await ctx.broker.controller.submit(delete_acls(filters))
    return R(filter_results=[
        _Result(error_code=o.error, error_message=o.message, matching_acls=[
            _Match(error_code=0, error_message=None, resource_type=a.resource_type, resource_name=a.resource_name,
                   pattern_type=a.pattern_type, principal=a.principal, host=a.host, operation=a.operation,
                   permission_type=a.permission) for a in acls])
        for o, acls in out])


def handle(ctx, req):
    sec = ctx.broker.security
    if sec is None or sec.authorizer is None:
        return R(filter_results=[_Result(error_code=Errors.SECURITY_DISABLED, error_message="No Authorizer is configured.",
                                         matching_acls=[]) for _ in req.filters])
    if not ctx.authorize(ALTER, R_CLUSTER, CLUSTER_NAME):
        return R(filter_results=[_Result(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, error_message=None,
                                         matching_acls=[]) for _ in req.filters])
    filters = [AclFilter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
                         f.host_filter, f.operation, f.permission_type) for f in req.filters]
    return _delete(ctx, filters)
