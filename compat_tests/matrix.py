"""The client compatibility matrix, filled in by the compat tests themselves.

Each compat test maps to (client, feature) by its node id. At the end of a run the outcomes
are written to .deps/compat-matrix.md; scripts/update-compat-table.py copies that table into
README.md between its markers, so the README shows what the tests showed.
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

CLIENTS = ["confluent-kafka", "kcat", "kafka-python", "aiokafka", "java-4.3.0", "java-3.9.0",
           "spark-4.0"]
CLIENT_LABELS = {
    "confluent-kafka": "confluent-kafka (librdkafka 2.x)",
    "kcat": "kcat (Debian, librdkafka 2.0.2)",
    "kafka-python": "kafka-python",
    "aiokafka": "aiokafka",
    "java-4.3.0": "Java kafka-clients 4.3.0",
    "java-3.9.0": "Java kafka-clients 3.9.0 (Spark 4.0)",
    "spark-4.0": "Spark 4.0 `format(\"kafka\")` (spark-sql-kafka-0-10)",
}
FEATURES = ["produce + consume, 5 codecs, ListOffsets", "admin + configs", "classic groups",
            "KIP-848 groups", "transactions", "TLS + SASL (SCRAM, PLAIN, mTLS)"]

# (feature, node-id regex, client). A client of None comes from the regex group "client";
# "{v}" is filled from the group "v" (a Java version).
RULES = [
    (FEATURES[0], r"test_client_roundtrip\.py::\w+\[(?P<client>[^\]]+)\]", None),
    (FEATURES[0], r"test_client_batches\.py::\w+\[(?P<client>[^\]]+)\]", None),
    (FEATURES[0], r"test_legacy_produce\.py::", "kafka-python"),
    (FEATURES[1], r"test_client_roundtrip\.py::\w+\[(?P<client>(?!kcat)[^\]]+)\]", None),
    (FEATURES[1], r"test_admin\.py::test_confluent_", "confluent-kafka"),
    (FEATURES[1], r"test_admin\.py::test_kafka_python", "kafka-python"),
    (FEATURES[1], r"test_admin\.py::test_aiokafka", "aiokafka"),
    (FEATURES[1], r"test_admin\.py::test_java\w*\[(?P<v>[\d.]+)\]", "java-{v}"),
    (FEATURES[2], r"test_groups\w*\.py::test_three_consumers", "confluent-kafka"),
    (FEATURES[2], r"test_groups\w*\.py::test_(committed_offsets|static_member|admin_client|reset_offsets)", "confluent-kafka"),
    (FEATURES[2], r"test_groups\w*\.py::\w+\[(?P<client>kafka-python|aiokafka|confluent-kafka)\]", None),
    (FEATURES[2], r"test_groups\w*\.py::\w+\[java-(?P<v>[\d.]+)-classic\]", "java-{v}"),
    (FEATURES[3], r"test_groups\w*\.py::\w+\[java-(?P<v>[\d.]+)-consumer\b", "java-{v}"),
    (FEATURES[3], r"test_groups_kip848\w*\.py::\w+\[(?:java-)?(?P<v>[\d.]+)", "java-{v}"),
    (FEATURES[4], r"test_transactions(_crash|_offsets)?\.py::test_(?!aiokafka)", "confluent-kafka"),
    (FEATURES[4], r"test_transactions\.py::test_aiokafka", "aiokafka"),
    (FEATURES[4], r"test_transactions_java\.py::\w+\[(?:java-)?(?P<v>[\d.]+)", "java-{v}"),
    (FEATURES[0], r"test_spark\w*\.py::test_(?!read_committed)", "spark-4.0"),
    (FEATURES[4], r"test_spark\.py::test_read_committed", "spark-4.0"),
    (FEATURES[5], r"test_security\.py::test_client_roundtrip\[(?P<client>.+)-(?:sasl_ssl_scram512|mtls|sasl_plaintext_plain)\]", None),
]


def classify(nodeid: str) -> list[tuple[str, str]]:
    out = []
    for feature, pattern, client in RULES:
        m = re.search(pattern, nodeid)
        if not m:
            continue
        groups = m.groupdict()
        if client is None:
            name = groups["client"]
        else:
            name = client.format(v=groups.get("v"))
        out.append((name, feature))
    return out


class MatrixRecorder:
    def __init__(self):
        self.results: dict[tuple[str, str], list[bool]] = defaultdict(list)

    def record(self, nodeid: str, passed: bool) -> None:
        for key in classify(nodeid):
            self.results[key].append(passed)

    def table(self) -> str:
        lines = ["| client | " + " | ".join(FEATURES) + " |",
                 "|---|" + "---|" * len(FEATURES)]
        for client in CLIENTS:
            cells = []
            for feature in FEATURES:
                runs = self.results.get((client, feature))
                if not runs:
                    cells.append("—")
                elif all(runs):
                    cells.append(f"✅ {len(runs)}/{len(runs)}")
                else:
                    cells.append(f"❌ {runs.count(False)} of {len(runs)} failed")
            lines.append(f"| {CLIENT_LABELS[client]} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> None:
        if self.results:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.table())
