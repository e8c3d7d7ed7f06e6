"""IncrementalAlterConfigs (44), versions 0-1: SET, DELETE, APPEND and SUBTRACT (list configs)
on topic and broker resources, through the controller (``kbroker.broker.config_changes``);
broker loggers are set here, as Kafka sets them on the broker it asks."""

from __future__ import annotations

import logging

from kbroker.broker.config_changes import BROKER_LOGGER_RESOURCE, DELETE, SET, Change, alter
from kbroker.wire.errors import Errors
from kbroker.wire.generated.incremental_alter_configs_response import IncrementalAlterConfigsResponse

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1

_Resp = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
_LEVELS = {"OFF": logging.CRITICAL + 10, "FATAL": logging.CRITICAL, "ERROR": logging.ERROR,
           "WARN": logging.WARNING, "INFO": logging.INFO, "DEBUG": logging.DEBUG, "TRACE": logging.DEBUG}


def _set_loggers(node_id: int, res, validate_only: bool) -> tuple[int, str | None]:
    """Kafka's RuntimeLoggerManager for Python loggers: SET a level, DELETE back to the
    parent's (not for root)."""
    if res.resource_name != str(node_id):
        return Errors.INVALID_REQUEST, f"Unexpected broker id, expected {node_id} but received {res.resource_name}"
    plan = []
    for c in res.configs:
        if c.config_operation == SET:
            level = _LEVELS.get((c.value or "").upper())
            if level is None:
                return (Errors.INVALID_CONFIG, f"Cannot set the log level of {c.name} to {c.value} as it is not "
                        f"a supported log level. Valid log levels are {', '.join(_LEVELS)}")
        elif c.config_operation == DELETE:
            if c.name == "root":
                return Errors.INVALID_REQUEST, "Removing the log level of the root logger is not allowed"
            level = logging.NOTSET
        else:
            return Errors.INVALID_REQUEST, f"Operation type {c.config_operation} is not allowed for the BROKER_LOGGER resource"
        plan.append((logging.getLogger() if c.name == "root" else logging.getLogger(c.name), level))
    if not validate_only:
        for lg, level in plan:
            lg.setLevel(level)
    return Errors.NONE, None


async def _alter(ctx, req):
    broker = ctx.broker
    changes = [Change(r.resource_type, r.resource_name,
                      [(c.name, c.config_operation, c.value) for c in r.configs]) for r in req.resources]
    persistent = [c for c in changes if c.resource_type != BROKER_LOGGER_RESOURCE]
    done = iter(await alter(broker, persistent, req.validate_only) if persistent else [])
    out = []
    for r, c in zip(req.resources, changes):
        code, msg = _set_loggers(broker.node_id, r, req.validate_only) \
            if c.resource_type == BROKER_LOGGER_RESOURCE else next(done)
        out.append(_Resp(error_code=code, error_message=msg, resource_type=c.resource_type,
                         resource_name=c.resource_name))
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=out)


def handle(ctx, req):
    return _alter(ctx, req)
