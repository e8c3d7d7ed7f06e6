"""Type model built from a parsed schema: messages, structs, fields, types.

Everything the emitter and the test strategies need is resolved here once: Python names,
version ranges clipped to where a struct can exist, defaults as Python values, and which struct
a field refers to (inline, or one of the message's commonStructs).
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field as dc_field
from pathlib import Path

from kbroker.wire.codegen.schema import ALL, NONE, Versions, load_json

# name -> (struct format code, size) for fixed-width types; uuid is fixed too but not a number
FIXED = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
    "bool": ("?", 1),
}
INTS = {"int8", "int16", "uint16", "int32", "int64"}
PRIMITIVES = set(FIXED) | {"uuid", "string", "bytes", "records"}


def snake(name: str) -> str:
    """Kafka JSON name -> Python name: an underscore before every capital, lowercased.

    Deliberately the plainest rule (TopicData -> topic_data, KRaftVersion -> k_raft_version),
    so anyone can derive a module or attribute name without looking it up.
    """
    s = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    if keyword.iskeyword(s):
        s += "_"
    return s


@dataclass
class FieldType:
    kind: str                       # a PRIMITIVES name, "struct" or "array"
    struct: "Struct | None" = None  # for struct, or array of struct
    elem: "FieldType | None" = None  # for array

    @property
    def is_array(self):
        return self.kind == "array"

    @property
    def is_struct(self):
        return self.kind == "struct"

    def __str__(self):
        if self.kind == "array":
            return f"[]{self.elem}"
        if self.kind == "struct":
            return self.struct.name
        return self.kind


@dataclass
class Field:
    name: str                 # JSON name
    attr: str                 # Python attribute name
    type: FieldType
    versions: Versions        # where present at all (clipped to the owning struct)
    nullable: Versions
    tagged: Versions          # where it is a tagged field (subset of versions)
    tag: int | None
    default: object           # Python value (list / struct marker handled by the emitter)
    ignorable: bool
    flexible_override: Versions | None   # field-level "flexibleVersions" (RequestHeader.ClientId)
    map_key: bool = False
    entity_type: str | None = None
    about: str = ""

    @property
    def untagged(self) -> Versions:
        """Versions where the field is written inline (present and not tagged)."""
        if self.tagged.empty:
            return self.versions
        # taggedVersions is always a suffix of versions in practice; inline before it
        return self.versions & Versions(0, self.tagged.lo - 1)


@dataclass
class Struct:
    name: str                 # Kafka type name (class name)
    qualname: str             # dotted path inside the module (ProduceRequest.TopicProduceData)
    versions: Versions        # versions in which this struct can occur
    fields: list[Field] = dc_field(default_factory=list)
    parent: "Struct | None" = None
    children: list["Struct"] = dc_field(default_factory=list)   # nested classes

    @property
    def ident(self) -> str:
        """Module-level identifier for helper functions."""
        return self.qualname.replace(".", "_")


@dataclass
class Message:
    name: str
    kind: str                 # request / response / header / data / metadata
    api_key: int | None
    valid: Versions
    flexible: Versions
    source: str               # 'clients/ProduceRequest.json'
    struct: Struct = None
    structs: list[Struct] = dc_field(default_factory=list)  # every struct, parents first
    listeners: tuple = ()
    deprecated: Versions = NONE
    latest_unstable: bool = False

    @property
    def module(self) -> str:
        return snake(self.name)


ABSENT = object()   # no "default" key (JSON null is a real default for nullable structs)


def _parse_default(ftype: FieldType, raw, fname: str):
    """Schema default -> Python value. Arrays/structs: None means null, else 'EMPTY'/'NEW'."""
    k = ftype.kind
    if raw is ABSENT:
        if k in INTS:
            return 0
        return {"bool": False, "float64": 0.0, "string": "", "bytes": b"", "uuid": "ZERO",
                "records": None, "array": "EMPTY", "struct": "NEW"}[k]
    if k in INTS:
        if isinstance(raw, str):
            raw = int(raw, 0)
        return int(raw)
    if k == "bool":
        if isinstance(raw, bool):
            return raw
        return {"true": True, "false": False}[str(raw).lower()]
    if k == "float64":
        return float(raw)
    if k == "string":
        return None if raw == "null" else str(raw)
    if k == "bytes":
        if raw == "null":
            return None
        if raw != "":
            raise ValueError(f"{fname}: bytes default must be null or empty")
        return b""
    if k == "records":
        return None
    if k == "uuid":
        if raw in ("", "AAAAAAAAAAAAAAAAAAAAAA"):
            return "ZERO"
        raise ValueError(f"{fname}: unsupported uuid default {raw!r}")
    if k == "array":
        return None if raw == "null" else "EMPTY"
    if k == "struct":
        return None if raw in (None, "null") else "NEW"
    raise ValueError(f"{fname}: no default rule for {k}")


class _Builder:
    def __init__(self, spec: dict, source: str):
        self.spec = spec
        self.source = source
        self.valid = Versions.parse(spec["validVersions"])
        self.flexible = Versions.parse(spec.get("flexibleVersions", "none"))
        self.common_specs = {c["name"]: c for c in spec.get("commonStructs", [])}
        self.common: dict[str, Struct] = {}
        self.names: set[str] = set()
        self.structs: list[Struct] = []

    def build(self) -> Message:
        s = self.spec
        top = Struct(s["name"], s["name"], self.valid)
        self.structs.append(top)
        self.names.add(top.name)
        msg = Message(
            name=s["name"], kind=s["type"], api_key=s.get("apiKey"), valid=self.valid,
            flexible=self.flexible, source=self.source, struct=top, structs=self.structs,
            listeners=tuple(s.get("listeners", ())),
            deprecated=Versions.parse(s.get("deprecatedVersions"), NONE),
            latest_unstable=bool(s.get("latestVersionUnstable", False)),
        )
        # common structs are nested directly in the message class, defined before use
        for cname, cspec in self.common_specs.items():
            cv = Versions.parse(cspec.get("versions"), ALL) & self.valid
            cs = Struct(cname, f"{top.name}.{cname}", cv, parent=top)
            self._claim(cname)
            self.common[cname] = cs
            top.children.append(cs)
            self.structs.append(cs)
        for cname, cspec in self.common_specs.items():
            self._fields(self.common[cname], cspec["fields"])
        self._fields(top, s["fields"])
        return msg

    def _claim(self, name):
        if name in self.names:
            raise ValueError(f"{self.source}: duplicate struct name {name}")
        self.names.add(name)

    def _type(self, tname: str, fspec: dict, owner: Struct, fversions: Versions) -> FieldType:
        if tname.startswith("[]"):
            return FieldType("array", elem=self._type(tname[2:], fspec, owner, fversions))
        if tname in PRIMITIVES:
            return FieldType(tname)
        if "fields" in fspec:
            st = Struct(tname, f"{owner.qualname}.{tname}", owner.versions & fversions, parent=owner)
            self._claim(tname)
            owner.children.append(st)
            self.structs.append(st)
            self._fields(st, fspec["fields"])
            return FieldType("struct", struct=st)
        if tname in self.common:
            return FieldType("struct", struct=self.common[tname])
        raise ValueError(f"{self.source}: unknown type {tname}")

    def _fields(self, st: Struct, specs: list[dict]):
        seen = set()
        for f in specs:
            tagged = Versions.parse(f.get("taggedVersions"), NONE)
            # TransactionLogValue has tagged fields without "versions": present where tagged
            versions = Versions.parse(f.get("versions"), tagged if not tagged.empty else None)
            versions = versions & st.versions
            ftype = self._type(f["type"], f, st, versions)
            attr = snake(f["name"])
            if attr in seen or attr == "unknown_tagged_fields":
                raise ValueError(f"{self.source}: duplicate field {attr} in {st.name}")
            seen.add(attr)
            tag = f.get("tag")
            tag = None if tag is None else int(tag)
            if (tag is None) != tagged.empty:
                raise ValueError(f"{self.source}: {f['name']} needs both tag and taggedVersions")
            fo = f.get("flexibleVersions")
            st.fields.append(Field(
                name=f["name"], attr=attr, type=ftype, versions=versions,
                nullable=Versions.parse(f.get("nullableVersions"), NONE),
                tagged=tagged & versions, tag=tag,
                default=_parse_default(ftype, f.get("default", ABSENT), f["name"]),
                ignorable=bool(f.get("ignorable", False)),
                flexible_override=None if fo is None else Versions.parse(fo),
                map_key=bool(f.get("mapKey", False)),
                entity_type=f.get("entityType"),
                about=f.get("about", ""),
            ))


def build_message(path: Path, source: str) -> Message:
    return _Builder(load_json(path), source).build()
