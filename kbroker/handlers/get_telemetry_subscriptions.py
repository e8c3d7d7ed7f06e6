"""GetTelemetrySubscriptions (71), KIP-714: registered only when client telemetry is
configured (kbroker.metrics.telemetry)."""

from __future__ import annotations

from kbroker.metrics.telemetry import ACCEPTED
from kbroker.wire.generated.get_telemetry_subscriptions_response import GetTelemetrySubscriptionsResponse

API_KEY = 71
MIN_VERSION = 0
MAX_VERSION = 0


def handle(ctx, req):
    t = ctx.broker.client_telemetry
    return GetTelemetrySubscriptionsResponse(
        throttle_time_ms=0, error_code=0, client_instance_id=t.subscription(req.client_instance_id),
        subscription_id=t.subscription_id, accepted_compression_types=list(ACCEPTED),
        push_interval_ms=t.push_interval_ms, telemetry_max_bytes=t.max_bytes, delta_temporality=False,
        requested_metrics=list(t.prefixes))
