"""kcat (librdkafka's command-line tool) from Debian. It cannot set per-record headers or
timestamps when producing, nor administer topics, so the scenario gives it printable records
sharing one header set and uses confluent-kafka's admin client for topic management."""
from __future__ import annotations

import shutil
import subprocess

from compat_tests.clients import Consumed, Rec
from compat_tests.clients.confluent import ConfluentDriver

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


def _run(args, stdin=None, timeout=60):
    p = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"kcat {args} failed: {p.stderr.decode(errors='replace')}")
    return p.stdout


class KcatDriver(ConfluentDriver):
    name = "kcat"
    sets_timestamps = False
    per_record_headers = False

    def produce(self, topic, records: list[Rec], compression="none", **conf):
        headers = records[0].headers
        assert all(r.headers == headers for r in records), "kcat sends one header set per run"
        args = ["-b", self.bootstrap, "-P", "-t", topic, "-z", compression, "-K", "\t",
                "-X", "linger.ms=5"]
        for name, value in headers:
            args += ["-H", f"{name}={value.decode()}"]
        lines = b"".join(r.key + b"\t" + r.value + b"\n" for r in records)
        _run(args, stdin=lines)
        return None   # kcat reports no offsets; it exits non-zero unless all were delivered

    def consume(self, topic, count, **conf):
        out = _run(["-b", self.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e",
                    "-c", str(count), "-f", r"%p\t%o\t%T\t%k\t%s\t%h\n"])
        got = []
        for line in out.decode().splitlines():
            p, o, ts, k, v, h = line.split("\t")
            hdrs = tuple((n, val.encode()) for n, val in
                         (x.split("=", 1) for x in h.split(",") if x)) if h else ()
            got.append(Consumed(int(p), int(o), int(ts), k.encode(), v.encode(), hdrs))
        return got

    def latest_offsets(self, topic):
        parts = self.admin.list_topics(topic, timeout=30).topics[topic].partitions
        args = ["-b", self.bootstrap, "-Q"]
        for p in parts:
            args += ["-t", f"{topic}:{p}:-1"]
        result = {}
        for line in _run(args).decode().splitlines():
            # "topic [p] offset N"
            if " offset " in line:
                left, off = line.rsplit(" offset ", 1)
                result[int(left.split("[")[1].split("]")[0])] = int(off)
        return result

    def metadata_json(self):
        return _run(["-b", self.bootstrap, "-L", "-J"])
