"""Codec errors and Kafka error codes.

`CodecError` is the only exception the wire codec raises on bad input or on a message that
cannot be written at the requested version. `Errors` (Kafka's error codes, with retriability)
is generated from errors.tsv into `generated/error_codes.py` and re-exported here.
"""

from __future__ import annotations


class CodecError(ValueError):
    """Malformed bytes, or a value that cannot be encoded at the requested version."""


class FrameTooLarge(CodecError):
    """A frame's size prefix is negative or above the configured maximum."""

    def __init__(self, size: int, max_size: int):
        super().__init__(f"frame size {size} outside [0, {max_size}]")
        self.size = size
        self.max_size = max_size


class UnsupportedVersionError(CodecError):
    """A request names an API key or version this codec has no schema for.

    Carries the partially decoded request header (api key, version, correlation id, client id)
    so the broker can still answer UNSUPPORTED_VERSION.
    """

    def __init__(self, message: str, header=None):
        super().__init__(message)
        self.header = header


from kbroker.wire.generated.error_codes import Errors  # noqa: E402  (generated; imports nothing from here)



def error_name(code: int) -> str:
    """Kafka's name for an error code (``UNKNOWN_TOPIC_OR_PARTITION``), or the number if unknown."""
    try:
        return Errors(code).name
    except ValueError:
        return str(code)


__all__ = ["CodecError", "FrameTooLarge", "UnsupportedVersionError", "Errors", "error_name"]
