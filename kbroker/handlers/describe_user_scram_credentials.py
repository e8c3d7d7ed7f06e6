"""DescribeUserScramCredentials (50): mechanisms and iterations per user (DESCRIBE on the
cluster), never the keys."""

from __future__ import annotations

from kbroker.security.acls import DESCRIBE, R_CLUSTER, CLUSTER_NAME
from kbroker.security.scram import MECHANISMS
from kbroker.wire.errors import Errors
from kbroker.wire.generated.describe_user_scram_credentials_response import DescribeUserScramCredentialsResponse as R

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0


def handle(ctx, req):
    if not ctx.authorize(DESCRIBE, R_CLUSTER, CLUSTER_NAME):
        return R(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, error_message=None, results=[])
    scram = ctx.broker.image.security.scram
    by_user: dict[str, list] = {}
    for (name, mech), cred in sorted(scram.items()):
        by_user.setdefault(name, []).append(
            R.DescribeUserScramCredentialsResult.CredentialInfo(mechanism=MECHANISMS[mech][0], iterations=cred.iterations))
    results = []
    if not req.users:
        for name, infos in by_user.items():
            results.append(R.DescribeUserScramCredentialsResult(user=name, error_code=0, error_message=None,
                                                                credential_infos=infos))
    else:
        names = [u.name for u in req.users]
        for name in dict.fromkeys(names):
            if names.count(name) > 1:
                results.append(R.DescribeUserScramCredentialsResult(
                    user=name, error_code=Errors.DUPLICATE_RESOURCE,
                    error_message=f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}",
                    credential_infos=[]))
            elif name not in by_user:
                results.append(R.DescribeUserScramCredentialsResult(
                    user=name, error_code=Errors.RESOURCE_NOT_FOUND,
                    error_message=f"Attempt to describe a user credential that does not exist: {name}",
                    credential_infos=[]))
            else:
                results.append(R.DescribeUserScramCredentialsResult(user=name, error_code=0, error_message=None,
                                                                    credential_infos=by_user[name]))
    return R(error_code=0, error_message=None, results=results)
