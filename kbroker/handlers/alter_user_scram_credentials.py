"""AlterUserScramCredentials (51): upsert/delete SCRAM credentials (ALTER on the cluster);
stored as UserScramCredentialRecord in the metadata log (kbroker.security.controller_ops)."""

from __future__ import annotations

from kbroker.security.acls import ALTER, CLUSTER_NAME, R_CLUSTER
from kbroker.security.controller_ops import alter_scram
from kbroker.wire.errors import Errors
from kbroker.wire.generated.alter_user_scram_credentials_response import AlterUserScramCredentialsResponse as R

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0


async def _alter(ctx, req):
    dels = [(d.name, d.mechanism) for d in req.deletions]
    ups = [(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password)) for u in req.upsertions]
    out = await ctx.broker.controller.submit(alter_scram(dels, ups))
    return R(results=[R.AlterUserScramCredentialsResult(user=n, error_code=o.error, error_message=o.message)
                      for n, o in out.items()])


def handle(ctx, req):
    if not ctx.authorize(ALTER, R_CLUSTER, CLUSTER_NAME):
        names = dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions])
        return R(results=[R.AlterUserScramCredentialsResult(user=n, error_code=Errors.CLUSTER_AUTHORIZATION_FAILED,
                                                            error_message=None) for n in names])
    return _alter(ctx, req)
