"""KRaft metadata records: the type table and Kafka's record framing.

A metadata record in the ``__cluster_metadata`` log is a record with a null key whose value is
(Kafka's ``MetadataRecordSerde``)::

    unsigned varint  frame version (1)
    unsigned varint  api key (the record type: 2 = TopicRecord, 3 = PartitionRecord ...)
    unsigned varint  record version
    the record, encoded at that version (generated classes, ``kbroker.wire.generated``)

``RECORD_VERSIONS`` says which version the controller writes for each type.
"""

from __future__ import annotations

import importlib
import re

from kbroker.wire.errors import CodecError
from kbroker.wire.primitives import Writer, as_view, rd_uvarint, wr_uvarint

FRAME_VERSION = 1

# record type (apiKey in metadata/*.json) -> class name
RECORD_TYPES: dict[int, str] = {
    0: "RegisterBrokerRecord",
    1: "UnregisterBrokerRecord",
    2: "TopicRecord",
    3: "PartitionRecord",
    4: "ConfigRecord",
    5: "PartitionChangeRecord",
    7: "FenceBrokerRecord",
    8: "UnfenceBrokerRecord",
    9: "RemoveTopicRecord",
    10: "DelegationTokenRecord",
    11: "UserScramCredentialRecord",
    12: "FeatureLevelRecord",
    14: "ClientQuotaRecord",
    15: "ProducerIdsRecord",
    17: "BrokerRegistrationChangeRecord",
    18: "AccessControlEntryRecord",
    19: "RemoveAccessControlEntryRecord",
    20: "NoOpRecord",
    21: "ZkMigrationStateRecord",
    22: "RemoveUserScramCredentialRecord",
    23: "BeginTransactionRecord",
    24: "EndTransactionRecord",
    25: "AbortTransactionRecord",
    26: "RemoveDelegationTokenRecord",
    27: "RegisterControllerRecord",
}
TYPE_BY_NAME = {name: key for key, name in RECORD_TYPES.items()}

# The version the controller writes (the newest whose fields we fill in).
RECORD_VERSIONS: dict[str, int] = {
    "RegisterBrokerRecord": 3,
    "PartitionRecord": 0,
    "PartitionChangeRecord": 0,
    "BrokerRegistrationChangeRecord": 1,   # v1: in_controlled_shutdown
}

_classes: dict[int, type] = {}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def record_class(record_type: int) -> type:
    cls = _classes.get(record_type)
    if cls is None:
        name = RECORD_TYPES.get(record_type)
        if name is None:
            raise CodecError(f"unknown metadata record type {record_type}")
        mod = importlib.import_module(f"kbroker.wire.generated.{_snake(name)}")
        cls = _classes[record_type] = getattr(mod, name)
    return cls


def record_type(record) -> int:
    return TYPE_BY_NAME[type(record).__name__]


def encode_record(record, version: int | None = None) -> bytes:
    name = type(record).__name__
    if version is None:
        version = RECORD_VERSIONS.get(name, 0)
    w = Writer()
    wr_uvarint(w, FRAME_VERSION)
    wr_uvarint(w, TYPE_BY_NAME[name])
    wr_uvarint(w, version)
    record.encode_into(w, version)
    return w.getvalue()


def decode_record(data):
    """One framed metadata record -> the generated record object."""
    buf = as_view(data)
    try:
        frame, pos = rd_uvarint(buf, 0)
        rtype, pos = rd_uvarint(buf, pos)
        version, pos = rd_uvarint(buf, pos)
    except (IndexError, ValueError) as e:
        raise CodecError(f"malformed metadata record frame: {e}") from None
    if frame != FRAME_VERSION:
        raise CodecError(f"unsupported metadata record frame version {frame}")
    return record_class(rtype).decode(buf[pos:], version)
