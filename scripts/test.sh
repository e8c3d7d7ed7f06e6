#!/usr/bin/env bash
# Install everything the tests need, then run them all: what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
# Debian's kcat (librdkafka 2.0.2): also our check that an older librdkafka parses ApiVersions.
# nft and tc (nftables, iproute2): the fault harness cuts and slows links between cluster nodes
# (compat_tests/cluster_faults/network.py).
apt_missing=""
command -v kcat >/dev/null || apt_missing="$apt_missing kcat"
command -v nft >/dev/null || apt_missing="$apt_missing nftables"
command -v tc >/dev/null || apt_missing="$apt_missing iproute2"
if [ -n "$apt_missing" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $apt_missing >/dev/null
fi
bash scripts/fetch-java-clients.sh
bash scripts/install-librdkafka-suite-deps.sh   # librdkafka's own test suite (compat_tests/test_librdkafka_suite.py)

python3 -m kbroker.wire.codegen --check
KBROKER_NO_SKIPS=1 python3 -m pytest -q -p no:cacheprovider --durations=25 tests compat_tests "$@"
