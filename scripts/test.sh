#!/usr/bin/env bash
# Install everything the tests need, then run them all: what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
if ! command -v kcat >/dev/null; then
  # Debian's kcat (librdkafka 2.0.2): also our check that an older librdkafka parses ApiVersions.
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq kcat >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq kcat >/dev/null; fi
fi
bash scripts/fetch-java-clients.sh
bash scripts/install-librdkafka-suite-deps.sh   # librdkafka's own test suite (compat_tests/test_librdkafka_suite.py)

python3 -m kbroker.wire.codegen --check
KBROKER_NO_SKIPS=1 python3 -m pytest -q -p no:cacheprovider tests compat_tests "$@"
