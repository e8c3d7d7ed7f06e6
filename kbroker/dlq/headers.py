"""The context headers a dead letter carries (values are UTF-8 text)."""

SUFFIX = ".dlq"
ORIGINAL_TOPIC = "dlq.original.topic"
ORIGINAL_PARTITION = "dlq.original.partition"
ORIGINAL_OFFSET = "dlq.original.offset"
ORIGINAL_TIMESTAMP = "dlq.original.timestamp"
ERROR = "dlq.error"
ATTEMPTS = "dlq.attempts"
PARKED_AT = "dlq.parked.at"
REPLAY_COUNT = "dlq.replay.count"     # on a replayed record: how many times it was replayed

CONTEXT = (ORIGINAL_TOPIC, ORIGINAL_PARTITION, ORIGINAL_OFFSET, ORIGINAL_TIMESTAMP, ERROR, ATTEMPTS, PARKED_AT)


def header_map(headers) -> dict[str, str]:
    """Last value per key, decoded (a record's headers are (key, bytes | None) pairs)."""
    out = {}
    for k, v in headers or ():
        out[k] = v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else v
    return out


def without_context(headers) -> list:
    """The record's own headers: dead-letter context removed, replay count kept for the caller to set."""
    drop = set(CONTEXT) | {REPLAY_COUNT}
    return [(k, v) for k, v in headers or () if k not in drop]
