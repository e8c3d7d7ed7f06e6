"""Log directory formatting: ``meta.properties`` in Kafka's format, cluster ids.

Kafka's ``kafka-storage.sh format`` writes, in every log directory (and the metadata log dir)::

    #
    #Sat Nov 21 07:03:18 UTC 2026
    cluster.id=MkU3OEVBNTcwNTJENDM2Qg
    directory.id=...
    node.id=1
    version=1

``ensure_formatted`` does the same on first start (the embedded default formats itself), and on
later starts checks that every directory belongs to this node and cluster.
"""

from __future__ import annotations

import base64
import logging
import os
import time
import uuid

from kbroker.config import parse_properties

log = logging.getLogger("kbroker.storage")

META_PROPERTIES = "meta.properties"


class StorageError(RuntimeError):
    pass


def uuid_to_str(u: uuid.UUID | bytes) -> str:
    raw = u.bytes if isinstance(u, uuid.UUID) else bytes(u)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def str_to_uuid(s: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``: 22 characters of unpadded base64url."""
    raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a Kafka uuid: {s!r}")
    return uuid.UUID(bytes=raw)


def random_uuid() -> uuid.UUID:
    """Kafka's ``Uuid.randomUuid()``: never zero, never the metadata topic id (1), and never
    one whose string form starts with '-' (it would look like a command-line flag)."""
    while True:
        u = uuid.uuid4()
        if u.int > 1 and not uuid_to_str(u).startswith("-"):
            return u


def write_properties(path: str, props: dict[str, str]) -> None:
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    body = "#\n#" + stamp + "\n" + "".join(f"{k}={v}\n" for k, v in props.items())
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path) or ".")


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_meta(dir_path: str) -> dict[str, str] | None:
    p = os.path.join(dir_path, META_PROPERTIES)
    try:
        with open(p, encoding="utf-8") as f:
            return parse_properties(f.read())
    except FileNotFoundError:
        return None


def format_dir(dir_path: str, cluster_id: str, node_id: int) -> dict[str, str]:
    os.makedirs(dir_path, exist_ok=True)
    props = {
        "cluster.id": cluster_id,
        "directory.id": uuid_to_str(random_uuid()),
        "node.id": str(node_id),
        "version": "1",
    }
    write_properties(os.path.join(dir_path, META_PROPERTIES), props)
    log.info("formatted %s (cluster.id=%s, node.id=%d)", dir_path, cluster_id, node_id)
    return props


def ensure_formatted(dirs: list[str], node_id: int, cluster_id: str | None = None,
                     *, format_if_needed: bool = True) -> str:
    """Check (or format) every directory; return the cluster id."""
    dirs = list(dict.fromkeys(os.path.abspath(d) for d in dirs))
    metas = {d: read_meta(d) for d in dirs}
    found = {m.get("cluster.id") for m in metas.values() if m}
    if len(found) > 1:
        raise StorageError(f"log directories belong to different clusters: {sorted(found)}")
    existing = found.pop() if found else None
    if cluster_id and existing and cluster_id != existing:
        raise StorageError(f"log directories are formatted for cluster {existing}, not {cluster_id}")
    cid = existing or cluster_id or uuid_to_str(random_uuid())
    for d, meta in metas.items():
        if meta is None:
            if not format_if_needed:
                raise StorageError(f"no {META_PROPERTIES} in {d}: run `kbroker format`")
            format_dir(d, cid, node_id)
            continue
        if meta.get("version") not in ("0", "1"):
            raise StorageError(f"{d}/{META_PROPERTIES}: unsupported version {meta.get('version')}")
        nid = meta.get("node.id", meta.get("broker.id"))
        if nid is not None and int(nid) != node_id:
            raise StorageError(f"{d}/{META_PROPERTIES} is for node {nid}, but node.id is {node_id}")
    return cid
