"""``kbroker format --standalone`` / ``--initial-controllers`` (kafka-storage.sh format,
KIP-853): write the bootstrap checkpoint (``00000000000000000000-0000000000.checkpoint`` in
``__cluster_metadata-0``) holding the voter set a new dynamic quorum starts with.

``--standalone``: this controller alone (it then grows with AddRaftVoter).
``--initial-controllers 1@host:port:DIRID,2@host:port:DIRID,...``: Kafka's syntax, each
controller's id, controller listener address and metadata log directory id; this node's own
entry must carry the directory id just written to its meta.properties, so a node formatted
with ``--initial-controllers`` uses the id given there (as kafka-storage.sh does).
"""

from __future__ import annotations

import os
import re

from kbroker.broker.storage import read_meta, str_to_uuid, write_properties, META_PROPERTIES
from kbroker.kraft.raft_log import METADATA_PARTITION_DIR
from kbroker.kraft.snapshots import DirSnapshotStore, write_bootstrap_checkpoint
from kbroker.wire.generated.voters_record import VotersRecord

_ENTRY = re.compile(r"^(\d+)@\[?([^\]@]+?)\]?:(\d+):([A-Za-z0-9_-]{22})$")


class FormatError(ValueError):
    pass


def parse_initial_controllers(text: str) -> list[tuple[int, str, int, str]]:
    out = []
    for item in text.split(","):
        m = _ENTRY.match(item.strip())
        if not m:
            raise FormatError(f"Invalid --initial-controllers entry {item!r}: expected id@host:port:directoryId")
        out.append((int(m.group(1)), m.group(2), int(m.group(3)), m.group(4)))
    if len({e[0] for e in out}) != len(out):
        raise FormatError("--initial-controllers names a controller twice")
    return out


def write_voters(cfg, *, standalone: bool, initial_controllers: str | None) -> VotersRecord:
    """Write the bootstrap checkpoint into the metadata log dir (formatted already)."""
    if not cfg.is_controller:
        raise FormatError("--standalone / --initial-controllers are for controllers (process.roles)")
    if cfg.voters:
        raise FormatError("--standalone / --initial-controllers cannot be used with controller.quorum.voters "
                          "(a static quorum); use controller.quorum.bootstrap.servers")
    meta_dir = os.path.abspath(cfg.metadata_log_dir)
    meta = read_meta(meta_dir)
    if meta is None:
        raise FormatError(f"{meta_dir} is not formatted")
    names = cfg.controller_listener_names
    listener = next((e for e in cfg.listeners if e.listener_name in names), None)
    if listener is None:
        raise FormatError("controller.listener.names names no listener of this node")
    V = VotersRecord.Voter
    feature = V.KRaftVersionFeature(min_supported_version=0, max_supported_version=1)
    if standalone:
        host = listener.host or "localhost"
        voters = [V(voter_id=cfg.node_id, voter_directory_id=str_to_uuid(meta["directory.id"]),
                    endpoints=[V.Endpoint(name=listener.listener_name, host=host, port=listener.port)],
                    k_raft_version_feature=feature)]
    else:
        entries = parse_initial_controllers(initial_controllers or "")
        mine = [e for e in entries if e[0] == cfg.node_id]
        if not mine:
            raise FormatError(f"--initial-controllers does not include this node ({cfg.node_id})")
        # this node's metadata log dir takes the directory id the operator gave it
        meta["directory.id"] = mine[0][3]
        write_properties(os.path.join(meta_dir, META_PROPERTIES), meta)
        voters = [V(voter_id=i, voter_directory_id=str_to_uuid(d),
                    endpoints=[V.Endpoint(name=listener.listener_name, host=h, port=p)],
                    k_raft_version_feature=feature) for i, h, p, d in entries]
    rec = VotersRecord(version=0, voters=voters)
    d = os.path.join(meta_dir, METADATA_PARTITION_DIR)
    os.makedirs(d, exist_ok=True)
    write_bootstrap_checkpoint(DirSnapshotStore(d), rec)
    return rec
