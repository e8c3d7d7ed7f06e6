"""PushTelemetry (72), KIP-714: registered only when client telemetry is configured."""

from __future__ import annotations

from kbroker.wire.generated.push_telemetry_response import PushTelemetryResponse

API_KEY = 72
MIN_VERSION = 0
MAX_VERSION = 0


def handle(ctx, req):
    code = ctx.broker.client_telemetry.push(req.client_instance_id, req.subscription_id, req.compression_type,
                                            req.metrics, ctx.now_ms, req.terminating)
    return PushTelemetryResponse(throttle_time_ms=0, error_code=code)
