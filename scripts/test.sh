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
# Python here may not write bytecode caches (PYTHONDONTWRITEBYTECODE=1 on CI's machines), so every
# broker and tool process the tests start would compile kbroker's 5 MB of source again: ~0.8 s
# of CPU each (a broker reached "listening" in 2.7 s, 1.0 s with the caches). Compile it once.
python3 -m compileall -q -j 0 kbroker >/dev/null
PYTEST=(env KBROKER_NO_SKIPS=1 python3 -m pytest -q -p no:cacheprovider)
if [ $# -gt 0 ]; then   # pytest arguments (-k, -x, paths ...): one run, as asked
  exec "${PYTEST[@]}" --durations=25 tests compat_tests "$@"
fi

# Every test, in three streams, so that a 2-core machine is busy while tests wait:
# - the simulations (pure CPU, seeded, no clock but their own) at the lowest priority beside
#   everything else, so they only take a core nobody else wants;
# - librdkafka's suite (~7 min, mostly its clients' waits) beside the other unit tests and
#   the kill -9 durability test (it counts records, it times nothing);
# - then the other compat tests, which start real brokers and time real faults, with nothing
#   beside them but the simulations.
# Each stream has its own pytest temp dir; a background stream's output is printed when it ends.
work=$(mktemp -d "${TMPDIR:-/tmp}/kbroker-tests.XXXXXX")
SIMS=(tests/sim tests/replication/test_simulation.py)
BESIDE_SUITE=(compat_tests/test_durability.py)
status=0 sims= suite=
trap 'kill $sims $suite 2>/dev/null || true' EXIT   # (no stream outlives an interrupted run)
# (a longer timeout than pyproject's 300 s: starved of a core, a batch of seeds only waits)
nice -n 19 "${PYTEST[@]}" --basetemp="$work/sims" --timeout=1800 "${SIMS[@]}" >"$work/sims.log" 2>&1 &
sims=$!
"${PYTEST[@]}" --basetemp="$work/suite" compat_tests/test_librdkafka_suite.py >"$work/suite.log" 2>&1 &
suite=$!
echo "== unit tests and ${BESIDE_SUITE[*]} (beside them: librdkafka's suite, and the simulations at low priority)"
"${PYTEST[@]}" --basetemp="$work/unit" --durations=10 tests "${SIMS[@]/#/--ignore=}" "${BESIDE_SUITE[@]}" || status=1
wait "$suite" || status=1
echo "== librdkafka's suite"; cat "$work/suite.log"
echo "== compat tests"
"${PYTEST[@]}" --basetemp="$work/compat" --durations=25 compat_tests \
  --ignore=compat_tests/test_librdkafka_suite.py "${BESIDE_SUITE[@]/#/--ignore=}" || status=1
wait "$sims" || status=1
echo "== simulations"; cat "$work/sims.log"
[ "$status" = 0 ] && rm -rf "$work"
exit "$status"
