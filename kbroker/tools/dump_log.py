"""``kbroker dump-log`` (kafka-dump-log.sh): decode segment files as Kafka's tool prints them.

``.log`` (batches; ``--deep-iteration`` / ``--print-data-log`` for records, control markers
decoded), ``.index`` / ``.timeindex`` (entries, ``--index-sanity-check``), producer-state
``.snapshot``, ``.txnindex`` (aborted transactions), and the metadata log and its
``.checkpoint`` snapshots (``--cluster-metadata-decoder``, or automatically for
``__cluster_metadata``): records decoded to JSON."""

from __future__ import annotations

import json
import os
import struct
import sys
import uuid

from kbroker.wire.compression import CODEC_NAMES, CorruptRecordError
from kbroker.wire.records import iter_batches



def add_parser(sub) -> None:
    p = sub.add_parser("dump-log", help="decode log segments, indexes, snapshots (like kafka-dump-log.sh)")
    p.add_argument("--files", required=True, help="comma-separated files to dump")
    p.add_argument("--print-data-log", action="store_true", help="print keys and values (implies --deep-iteration)")
    p.add_argument("--deep-iteration", action="store_true", help="print every record, not only batch headers")
    p.add_argument("--index-sanity-check", action="store_true")
    p.add_argument("--verify-index-only", action="store_true")
    p.add_argument("--max-bytes", type=int, default=2 ** 31 - 1)
    p.add_argument("--cluster-metadata-decoder", action="store_true", help="decode records as KRaft metadata records")
    p.add_argument("--offsets-decoder", action="store_true", help="accepted; __consumer_offsets records print raw")
    p.add_argument("--transaction-log-decoder", action="store_true", help="accepted; records print raw")
    p.set_defaults(tool_main=_main)


def _main(args) -> int:
    status = 0
    for path in args.files.split(","):
        print(f"Dumping {path}")
        try:
            if path.endswith(".log") or path.endswith(".checkpoint"):
                _dump_log(path, args)
            elif path.endswith(".timeindex"):
                _dump_index(path, ">qi", "timestamp: {0} offset: {1}", args, relative=1)
            elif path.endswith(".index"):
                _dump_index(path, ">ii", "offset: {0} position: {1}", args, relative=0)
            elif path.endswith(".snapshot"):
                _dump_snapshot(path)
            elif path.endswith(".txnindex"):
                _dump_txnindex(path)
            else:
                print(f"Ignoring unknown file {path}", file=sys.stderr)
        except BrokenPipeError:
            sys.stdout = None   # stdout closed early (`... | head`)
            return 0
        except (OSError, ValueError) as e:
            print(f"Could not dump {path}: {e}", file=sys.stderr)
            status = 1
    return status


def _base_offset(path: str) -> int:
    name = os.path.basename(path).split(".")[0].split("-")[0]
    return int(name) if name.isdigit() else 0


def _dump_index(path, fmt, line, args, relative: int) -> None:
    base = _base_offset(path)
    st = struct.Struct(fmt)
    data = open(path, "rb").read()
    last = -1
    problems = 0
    for i in range(0, len(data) - st.size + 1, st.size):
        vals = list(st.unpack_from(data, i))
        if (i and not any(vals)) or (relative == 1 and vals[0] == 0):
            break   # preallocated tail of an active segment's index
        vals[relative] += base
        key = vals[relative]
        if key < last:
            problems += 1
        last = key
        if not (args.verify_index_only or args.index_sanity_check):
            print(line.format(*vals))
    if args.index_sanity_check or args.verify_index_only:
        print(f"{path} passed sanity check." if not problems else f"{path}: {problems} entries out of order")


def _dump_snapshot(path: str) -> None:
    from kbroker.txn.producer_snapshot import read_snapshot_file
    for e in read_snapshot_file(path):
        txn = f"OptionalLong[{e.current_txn_first_offset}]" if e.current_txn_first_offset >= 0 else "OptionalLong.empty"
        first_seq = e.last_sequence - e.offset_delta if e.last_sequence >= 0 else -1
        print(f"producerId: {e.producer_id} producerEpoch: {e.epoch} coordinatorEpoch: {e.coordinator_epoch} "
              f"currentTxnFirstOffset: {txn} lastTimestamp: {e.timestamp} firstSequence: {first_seq} "
              f"lastSequence: {e.last_sequence} lastOffset: {e.last_offset} offsetDelta: {e.offset_delta} "
              f"timestamp: {e.timestamp}")


def _dump_txnindex(path: str) -> None:
    st = struct.Struct(">hqqqq")
    data = open(path, "rb").read()
    for i in range(0, len(data) - st.size + 1, st.size):
        v, pid, first, last, lso = st.unpack_from(data, i)
        print(f"version: {v} producerId: {pid} firstOffset: {first} lastOffset: {last} lastStableOffset: {lso}")


def to_json(obj):
    """A generated message (metadata record) as plain JSON values."""
    if isinstance(obj, (list, tuple)):
        return [to_json(x) for x in obj]
    if isinstance(obj, uuid.UUID):
        from kbroker.broker.storage import uuid_to_str
        return uuid_to_str(obj)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj).hex()
    fields = getattr(obj, "_FIELDS", None)
    if fields is None:
        return obj
    return {_camel(f): to_json(getattr(obj, f)) for f in fields}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _metadata_payload(value: bytes) -> str:
    """As Kafka's --cluster-metadata-decoder prints it: {"type":..., "version":..., "data":...}."""
    from kbroker.kraft.records import decode_record
    from kbroker.wire.primitives import rd_uvarint
    try:
        rec = decode_record(value)
        _, pos = rd_uvarint(value, 0)
        _, pos = rd_uvarint(value, pos)
        version, _ = rd_uvarint(value, pos)
    except Exception as e:
        return f"<undecodable metadata record: {e}>"
    name = type(rec).__name__
    snake = "".join(("_" + c if c.isupper() and i else c) for i, c in enumerate(name)).upper()
    return json.dumps({"type": snake, "version": version, "data": to_json(rec)}, separators=(",", ":"))


def _control(rec) -> str:
    if rec.key is None or len(rec.key) < 4:
        return "unknown control record"
    ctype = struct.unpack_from(">h", rec.key, 2)[0]
    if ctype in (0, 1):
        epoch = struct.unpack_from(">i", rec.value, 2)[0] if rec.value and len(rec.value) >= 6 else -1
        return f"endTxnMarker: {'COMMIT' if ctype == 1 else 'ABORT'} coordinatorEpoch: {epoch}"
    names = {2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
    return f"{names.get(ctype, f'control type {ctype}')}"


def _dump_log(path: str, args) -> None:
    base = _base_offset(path)
    metadata = args.cluster_metadata_decoder or "__cluster_metadata" in path
    deep = args.deep_iteration or args.print_data_log or metadata
    print(f"Log starting offset: {base}")
    data = bytearray(open(path, "rb").read()[:args.max_bytes])
    pos = 0
    for b in _batches_before_zeros(data):
        ts_type = "LogAppendTime" if b.timestamp_type else "CreateTime"
        last_seq = b.base_sequence + b.last_offset_delta if b.base_sequence >= 0 else -1
        print(f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.records_count} "
              f"baseSequence: {b.base_sequence} lastSequence: {last_seq} producerId: {b.producer_id} "
              f"producerEpoch: {b.producer_epoch} partitionLeaderEpoch: {b.partition_leader_epoch} "
              f"isTransactional: {str(b.is_transactional).lower()} isControl: {str(b.is_control).lower()} "
              f"deleteHorizonMs: OptionalLong.empty position: {pos} {ts_type}: {b.max_timestamp} size: {b.size} "
              f"magic: {b.magic} compresscodec: {CODEC_NAMES.get(b.compression, b.compression)} crc: {b.crc} "
              f"isvalid: {str(b.verify_crc()).lower()}")
        pos += b.size
        if not deep:
            continue
        for i, rec in enumerate(b.records()):
            seq = b.base_sequence + i if b.base_sequence >= 0 else -1
            line = (f"| offset: {rec.offset} {ts_type}: {rec.timestamp} "
                    f"keySize: {-1 if rec.key is None else len(rec.key)} "
                    f"valueSize: {-1 if rec.value is None else len(rec.value)} sequence: {seq} "
                    f"headerKeys: [{','.join(k for k, _ in rec.headers)}]")
            if b.is_control:
                line += " " + _control(rec)
            elif metadata and rec.value is not None:
                line += " payload: " + _metadata_payload(rec.value)
            elif args.print_data_log:
                line += f" key: {_text(rec.key)} payload: {_text(rec.value)}"
            print(line)


def _batches_before_zeros(data):
    """The batches, stopping quietly at a zero-filled tail: an active segment of a
    flush.messages=1 partition has zeros written ahead of its appends (kbroker.log.fill_ahead),
    and a preallocated one is zeros past its end."""
    pos = 0
    try:
        for b in iter_batches(data):
            yield b
            pos += b.size
    except CorruptRecordError:   # (torn, zero length, magic 0: zeros read as a header)
        if any(data[pos:]):
            raise
        print(f"Zero-filled tail of {len(data) - pos} bytes from position {pos} "
              "(written ahead of the appends or preallocated; not log data)")


def _text(b):
    return "null" if b is None else b.decode("utf-8", "replace")
