"""DescribeCluster (60), versions 0-1: cluster id, a controller id clients can reach (Kafka's
KRaft brokers name a live broker, since controllers are not client endpoints), the live
brokers on the request's listener; v1 endpoint types (this node answers as a BROKER)."""

from __future__ import annotations

import random

from kbroker.handlers.metadata import AUTHORIZED_OPS_OMITTED, CLUSTER_OPS, brokers_for_listener
from kbroker.wire.errors import Errors
from kbroker.wire.generated.describe_cluster_response import DescribeClusterResponse

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 1

BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2
_Broker = DescribeClusterResponse.DescribeClusterBroker


def handle(ctx, req):
    v = ctx.api_version
    etype = req.endpoint_type if v >= 1 else BROKER_ENDPOINT
    if etype not in (BROKER_ENDPOINT, CONTROLLER_ENDPOINT):
        return DescribeClusterResponse(error_code=Errors.INVALID_REQUEST if v == 0 else Errors.UNSUPPORTED_ENDPOINT_TYPE,
                                       error_message=f"Unsupported endpoint type {etype}", brokers=[])
    if etype != BROKER_ENDPOINT:
        return DescribeClusterResponse(
            error_code=Errors.INVALID_REQUEST if v == 0 else Errors.MISMATCHED_ENDPOINT_TYPE,
            error_message="The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER",
            brokers=[])
    broker = ctx.broker
    nodes = brokers_for_listener(broker.image, ctx.listener_name)
    brokers = [_Broker(broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack) for b in nodes]
    controller = random.choice(brokers).broker_id if brokers else -1
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=BROKER_ENDPOINT,
        cluster_id=broker.cluster_id, controller_id=controller, brokers=brokers,
        cluster_authorized_operations=CLUSTER_OPS if req.include_cluster_authorized_operations else AUTHORIZED_OPS_OMITTED)
