#!/usr/bin/env bash
# Install what scripts/librdkafka-conformance.sh needs to fetch and build librdkafka's own
# integration test suite from Debian's librdkafka source package:
#   - a deb-src entry mirroring the machine's Debian (deb) entries, so `apt-get source` works;
#   - the C toolchain, dpkg-source, the compression headers the build uses, rapidjson
#     (the suite checks statistics JSON with it) and OpenSSL's headers (SSL, and with it SASL
#     PLAIN/SCRAM/OAUTHBEARER; GSSAPI, the one mechanism needing libsasl2-dev, stays off).
# Idempotent: adds the deb-src entry only when `apt-cache showsrc librdkafka` finds nothing,
# installs only missing packages. Needs root (or sudo).
set -euo pipefail

SUDO=
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi

DEBSRC=/etc/apt/sources.list.d/kbroker-debsrc.sources
PKGS="build-essential dpkg-dev pkg-config zlib1g-dev libzstd-dev liblz4-dev rapidjson-dev libssl-dev"

has_src() { [ -n "$(apt-cache showsrc librdkafka 2>/dev/null | grep -m1 '^Package: librdkafka')" ]; }

updated=0
if ! has_src; then
  $SUDO apt-get update -qq || true
  updated=1
fi
if ! has_src; then
  # Mirror every Debian 'deb' entry as 'deb-src' (deb822 .sources files and one-line .list files),
  # so the source comes from the same mirror, suites and signing key as the binaries here.
  tmp=$(mktemp)
  python3 - "$tmp" <<'PY'
import glob, re, sys
out = []
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in re.split(r"\n\s*\n", open(path).read()):
        fields = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[0].isspace():
                continue
            k, v = line.split(":", 1)
            fields[k.strip().lower()] = v.strip()
        if "deb" in fields.get("types", "").split() and "debian" in fields.get("uris", "") \
                and fields.get("enabled", "yes").lower() != "no":
            lines = ["Types: deb-src", f"URIs: {fields['uris']}", f"Suites: {fields['suites']}",
                     f"Components: {fields.get('components', 'main')}"]
            if "signed-by" in fields:
                lines.append(f"Signed-By: {fields['signed-by']}")
            out.append("\n".join(lines))
for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
    try:
        text = open(path).read()
    except OSError:
        continue
    for line in text.splitlines():
        m = re.match(r"\s*deb\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s+(.+)$", line)
        if m and "debian" in m.group(2):
            opts = (m.group(1) or "").strip()
            entry = f"Types: deb-src\nURIs: {m.group(2)}\nSuites: {m.group(3)}\nComponents: {m.group(4).split('#')[0].strip()}"
            sb = re.search(r"signed-by=(\S+?)\]?(\s|$)", opts)
            if sb:
                entry += f"\nSigned-By: {sb.group(1).rstrip(']')}"
            out.append(entry)
if not out:
    sys.exit("no Debian 'deb' entry found under /etc/apt to mirror as deb-src")
open(sys.argv[1], "w").write("\n\n".join(out) + "\n")
PY
  $SUDO install -m 0644 "$tmp" "$DEBSRC"
  rm -f "$tmp"
  echo "added $DEBSRC:"; cat "$DEBSRC"
  $SUDO apt-get update -qq
  updated=1
fi
has_src || { echo "ERROR: 'apt-cache showsrc librdkafka' still finds no source package" >&2; exit 1; }

missing=
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  [ "$updated" = 1 ] || $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
  echo "installed:$missing"
fi
python3 -c 'import confluent_kafka' 2>/dev/null \
  || echo "note: python3 cannot import confluent_kafka (the kafka-topics.sh stand-in needs it; pip install -e '.[test]')"
echo "librdkafka suite dependencies: ok"
