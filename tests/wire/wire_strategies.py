"""Hypothesis strategies for generated messages, built from the codegen's schema model.

Deliberately independent of the emitted code: the values come from the JSON schema (types,
versions, nullability, tags), so a mistake in the emitter shows up as a failed round trip
instead of being mirrored by the test.
"""

from __future__ import annotations

import functools
import importlib
import uuid

from hypothesis import strategies as st

from kbroker.wire.codegen.cli import load_messages
from kbroker.wire.codegen.model import Field, FieldType, Message, Struct
from kbroker.wire.codegen.schema import protocol_dir

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
small_bytes = st.binary(max_size=24)
uuids = st.one_of(st.just(uuid.UUID(int=0)), st.binary(min_size=16, max_size=16).map(lambda b: uuid.UUID(bytes=b)))


def protocol_available() -> bool:
    return protocol_dir().is_dir()


@functools.lru_cache(maxsize=None)
def messages() -> tuple[Message, ...]:
    return tuple(load_messages())


def message_class(msg: Message, st_: Struct | None = None):
    mod = importlib.import_module(f"kbroker.wire.generated.{msg.module}")
    obj = mod
    for part in (st_ or msg.struct).qualname.split("."):
        obj = getattr(obj, part)
    return obj


def all_versions(msg: Message) -> list[int]:
    return list(range(msg.valid.lo, msg.valid.hi + 1))


def _default(msg: Message, f: Field):
    d, k = f.default, f.type.kind
    if k == "array":
        return None if d is None else []
    if k == "struct":
        return None if d is None else message_class(msg, f.type.struct)()
    if k == "uuid":
        return uuid.UUID(int=0)
    return d


def _scalar(kind: str, compact: bool):
    if kind in INT_RANGES:
        lo, hi = INT_RANGES[kind]
        return st.integers(lo, hi)
    if kind == "bool":
        return st.booleans()
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind == "uuid":
        return uuids
    if kind == "string":
        return text
    if kind in ("bytes", "records"):
        return small_bytes
    raise ValueError(kind)


def value_strategy(msg: Message, f: Field, t: FieldType, version: int, depth: int, unknown_tags: bool):
    nullable = version in f.nullable
    if t.kind == "array":
        e = t.elem
        if e.kind == "struct":
            elem = struct_strategy(msg, e.struct, version, depth + 1, unknown_tags)
        else:
            elem = _scalar(e.kind, False)
        s = st.lists(elem, max_size=3 if depth < 3 else 1)
    elif t.kind == "struct":
        s = struct_strategy(msg, t.struct, version, depth + 1, unknown_tags)
    else:
        s = _scalar(t.kind, False)
    if nullable:
        s = st.one_of(st.none(), s)
    return s


def _flexible(msg: Message, version: int) -> bool:
    return version in msg.flexible


def struct_strategy(msg: Message, struct: Struct, version: int, depth: int = 0, unknown_tags: bool = True):
    cls = message_class(msg, struct)
    kwargs = {}
    for f in struct.fields:
        if version in f.versions:
            kwargs[f.attr] = value_strategy(msg, f, f.type, version, depth, unknown_tags)
        else:
            kwargs[f.attr] = st.builds(functools.partial(_default, msg, f))
    if unknown_tags and _flexible(msg, version):
        # tags the schema defines (in any version) are not "unknown": Kafka rejects them
        known = {f.tag for f in struct.fields if f.tag is not None}
        tags = st.integers(0, 300).filter(lambda t: t not in known)
        unknown = st.lists(st.tuples(tags, small_bytes), max_size=2, unique_by=lambda tv: tv[0]).map(
            lambda l: sorted(l) or None)
        kwargs["unknown_tagged_fields"] = unknown
    return st.builds(cls, **kwargs)


def message_strategy(msg: Message, version: int, unknown_tags: bool = True):
    """Objects of msg valid at version; unknown_tags=False for peers that drop them."""
    return struct_strategy(msg, msg.struct, version, 0, unknown_tags)


# ----------------------------------------------------------------------------- plain random
# The same schema-driven values without Hypothesis, for batch checks against external
# implementations (one JVM run for thousands of cases; no shrinking needed to read a diff).

def _rand_scalar(kind: str, rng):
    if kind in INT_RANGES:
        lo, hi = INT_RANGES[kind]
        return rng.choice([x for x in (0, -1, 1, lo, hi, rng.randint(lo, hi)) if lo <= x <= hi])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "float64":
        return rng.choice([0.0, -1.5, 1e300, rng.uniform(-1e9, 1e9)])
    if kind == "uuid":
        return uuid.UUID(int=0) if rng.random() < 0.3 else uuid.UUID(int=rng.getrandbits(128))
    if kind == "string":
        return "".join(rng.choice("abcXYZ-_.é€😀") for _ in range(rng.randint(0, 8)))
    if kind in ("bytes", "records"):
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 12)))
    raise ValueError(kind)


def random_struct(msg: Message, struct: Struct, version: int, rng, depth: int = 0, unknown_tags: bool = True):
    cls = message_class(msg, struct)
    kwargs = {}
    for f in struct.fields:
        if version not in f.versions:
            kwargs[f.attr] = _default(msg, f)
            continue
        if version in f.nullable and rng.random() < 0.2:
            kwargs[f.attr] = None
            continue
        t = f.type
        if t.kind == "array":
            n = rng.randint(0, 3 if depth < 3 else 1)
            if t.elem.kind == "struct":
                kwargs[f.attr] = [random_struct(msg, t.elem.struct, version, rng, depth + 1, unknown_tags)
                                  for _ in range(n)]
            else:
                kwargs[f.attr] = [_rand_scalar(t.elem.kind, rng) for _ in range(n)]
        elif t.kind == "struct":
            kwargs[f.attr] = random_struct(msg, t.struct, version, rng, depth + 1, unknown_tags)
        else:
            kwargs[f.attr] = _rand_scalar(t.kind, rng)
    if unknown_tags and _flexible(msg, version) and rng.random() < 0.3:
        known = {f.tag for f in struct.fields if f.tag is not None}
        tags = sorted({t for t in (rng.randint(0, 200) for _ in range(2)) if t not in known})
        kwargs["unknown_tagged_fields"] = [(t, _rand_scalar("bytes", rng)) for t in tags] or None
    return cls(**kwargs)
