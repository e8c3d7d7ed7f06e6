"""ElectLeaders (43), versions 0-2: preferred (0) or unclean (1) leader elections, decided
by the active controller (kbroker.kraft.partition_admin; brokers forward it there).
(ALTER on the cluster: kbroker.security.authz_filters); v0 has no election type and means preferred."""

from __future__ import annotations

from kbroker.kraft.partition_admin import PREFERRED, elect_leaders
from kbroker.kraft.controller import ControllerResult
from kbroker.wire.generated.elect_leaders_response import ElectLeadersResponse as R

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2


def _response(results) -> R:
    return R(throttle_time_ms=0, error_code=0, replica_election_results=[
        R.ReplicaElectionResult(topic=t, partition_result=[
            R.ReplicaElectionResult.PartitionResult(partition_id=p, error_code=c, error_message=m)
            for p, c, m in parts]) for t, parts in results])


async def _elect(ctx, req):
    election = req.election_type if ctx.api_version >= 1 else PREFERRED
    targets = None if req.topic_partitions is None else \
        [(t.topic, list(t.partitions)) for t in req.topic_partitions]
    results = await ctx.broker.controller.submit(
        lambda c, now: ControllerResult(*elect_leaders(c.image, election, targets)))
    return _response(results)


def handle(ctx, req):
    return _elect(ctx, req)
