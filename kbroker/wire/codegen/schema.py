"""Locating and parsing Kafka's JSON message schemas.

The schemas are JSON with `//` comments (Kafka's own generator strips them too). They live
outside the repo (we commit only the generated Python), at ../shared/kafka-protocol relative to
the repo root unless KBROKER_PROTOCOL_DIR points elsewhere.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

# Directories read, in this order; each holds *.json schemas.
SCHEMA_DIRS = (
    "clients",
    "group-coordinator",
    "metadata",
    "raft",
    "transaction-coordinator",
    "share-coordinator",
)

REPO_ROOT = Path(__file__).resolve().parents[3]


def protocol_dir() -> Path:
    env = os.environ.get("KBROKER_PROTOCOL_DIR")
    if env:
        return Path(env)
    return REPO_ROOT.parent / "shared" / "kafka-protocol"


def strip_comments(text: str) -> str:
    """Remove `//` comments outside JSON strings."""
    out = []
    i, n = 0, len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def load_json(path: Path) -> dict:
    return json.loads(strip_comments(path.read_text(encoding="utf-8")))


def schema_files(root: Path | None = None) -> list[tuple[str, Path]]:
    """[(relative name like 'clients/ProduceRequest.json', path)], sorted for stable output."""
    root = root or protocol_dir()
    if not root.is_dir():
        raise SystemExit(f"kafka-protocol schemas not found at {root} (set KBROKER_PROTOCOL_DIR)")
    out = []
    for d in SCHEMA_DIRS:
        sub = root / d
        if not sub.is_dir():
            continue
        for p in sorted(sub.glob("*.json")):
            out.append((f"{d}/{p.name}", p))
    return out


@dataclass(frozen=True)
class Versions:
    """Inclusive version range; hi None = no upper bound; empty when lo > hi."""

    lo: int
    hi: int | None

    @staticmethod
    def parse(s, default: "Versions | None" = None) -> "Versions":
        if s is None:
            if default is None:
                raise ValueError("missing versions")
            return default
        s = str(s).strip()
        if s in ("none", ""):
            return NONE
        if s.endswith("+"):
            return Versions(int(s[:-1]), None)
        if "-" in s:
            a, b = s.split("-")
            return Versions(int(a), int(b))
        v = int(s)
        return Versions(v, v)

    @property
    def empty(self) -> bool:
        return self.hi is not None and self.lo > self.hi

    def __and__(self, other: "Versions") -> "Versions":
        lo = max(self.lo, other.lo)
        if self.hi is None:
            hi = other.hi
        elif other.hi is None:
            hi = self.hi
        else:
            hi = min(self.hi, other.hi)
        return Versions(lo, hi)

    def contains(self, other: "Versions") -> bool:
        """True if every version of `other` is in self (vacuously for empty `other`)."""
        if other.empty:
            return True
        if other.lo < self.lo:
            return False
        if self.hi is None:
            return True
        return other.hi is not None and other.hi <= self.hi

    def __contains__(self, v: int) -> bool:
        return self.lo <= v and (self.hi is None or v <= self.hi)

    def __str__(self):
        if self.empty:
            return "none"
        return f"{self.lo}+" if self.hi is None else f"{self.lo}-{self.hi}"


NONE = Versions(0, -1)
ALL = Versions(0, None)
