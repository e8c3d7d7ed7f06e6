"""Just enough protobuf to read OTLP ``MetricsData`` (what KIP-714 clients push): metric
names, number data points (gauge and sum) and their attributes. Histograms and summaries are
skipped. No protobuf dependency: the wire format is five cases of varint/length/fixed."""

from __future__ import annotations

import struct

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5


class ProtoError(ValueError):
    pass


def _varint(buf, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise ProtoError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtoError("varint too long")


def fields(buf):
    """Yield (field number, wire type, value): ints for varint/fixed, memoryview for LEN."""
    buf = memoryview(buf)
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == VARINT:
            v, pos = _varint(buf, pos)
        elif wt == FIXED64:
            v = buf[pos:pos + 8]
            pos += 8
        elif wt == LEN:
            n, pos = _varint(buf, pos)
            v = buf[pos:pos + n]
            pos += n
        elif wt == FIXED32:
            v = buf[pos:pos + 4]
            pos += 4
        else:
            raise ProtoError(f"unsupported wire type {wt}")
        if pos > len(buf):
            raise ProtoError("truncated field")
        yield num, wt, v


def _any_value(buf):
    for num, wt, v in fields(buf):
        if num == 1 and wt == LEN:
            return bytes(v).decode("utf-8", "replace")
        if num in (2, 3) and wt == VARINT:
            return str(v if num == 3 else bool(v)).lower() if num == 2 else str(v - (1 << 64) if v >> 63 else v)
        if num == 4 and wt == FIXED64:
            return repr(struct.unpack("<d", v)[0])
    return ""


def _attributes(kvs) -> dict[str, str]:
    out = {}
    for kv in kvs:
        key = value = ""
        for num, wt, v in fields(kv):
            if num == 1 and wt == LEN:
                key = bytes(v).decode("utf-8", "replace")
            elif num == 2 and wt == LEN:
                value = _any_value(v)
        out[key] = value
    return out


def _points(buf):
    """NumberDataPoints of a Gauge or Sum: (attributes, value)."""
    for num, wt, v in fields(buf):
        if num != 1 or wt != LEN:
            continue
        attrs, value = [], None
        for n, w, x in fields(v):
            if n == 7 and w == LEN:
                attrs.append(x)
            elif n == 4 and w == FIXED64:
                value = struct.unpack("<d", x)[0]
            elif n == 6 and w == FIXED64:
                value = float(struct.unpack("<q", x)[0])
        if value is not None:
            yield _attributes(attrs), value


def decode_metrics(data) -> tuple[dict[str, str], list[tuple[str, dict[str, str], float]]]:
    """MetricsData -> (resource attributes, [(metric name, point attributes, value)])."""
    resource: dict[str, str] = {}
    out = []
    for num, wt, rm in fields(data):
        if num != 1 or wt != LEN:
            continue
        for n, w, part in fields(rm):
            if n == 1 and w == LEN:          # Resource
                resource.update(_attributes(x for k, t, x in fields(part) if k == 1 and t == LEN))
            elif n == 2 and w == LEN:        # ScopeMetrics
                for k, t, metric in fields(part):
                    if k != 2 or t != LEN:
                        continue
                    name = ""
                    for mk, mt, mv in fields(metric):
                        if mk == 1 and mt == LEN:
                            name = bytes(mv).decode("utf-8", "replace")
                        elif mk in (5, 7) and mt == LEN:   # Gauge, Sum
                            for attrs, value in _points(mv):
                                out.append((name, attrs, value))
    return resource, out
