"""``kbroker format --add-scram`` (and ``--release-version``): records a new cluster starts with.

Kafka's syntax (kafka-storage.sh format): ``'SCRAM-SHA-512=[name=alice,password=alice-secret]'``
or ``'SCRAM-SHA-256=[name=alice,iterations=8192,salt="<base64>",saltedpassword="<base64>"]'``.
format writes the credential records to ``bootstrap-records`` in the metadata log dir (framed
metadata records, length-prefixed); the controller adds them to its bootstrap records when
it starts a new cluster (Kafka keeps them in ``bootstrap.checkpoint``).
"""

from __future__ import annotations

import base64
import os
import re
import struct

from kbroker.kraft.records import decode_record, encode_record
from kbroker.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, credential_from_salted, make_credential
from kbroker.wire.generated.user_scram_credential_record import UserScramCredentialRecord

FILE = "bootstrap-records"


def parse_add_scram(text: str) -> UserScramCredentialRecord:
    m = re.fullmatch(r"\s*(SCRAM-SHA-256|SCRAM-SHA-512)=\[(.*)\]\s*", text)
    if not m:
        raise ValueError(f"--add-scram {text!r}: expected SCRAM-SHA-256=[name=...,password=...] or SCRAM-SHA-512=[...]")
    mech = m.group(1)
    fields = {}
    for part in re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|[^,]*)', m.group(2)):
        k, v = part
        fields[k.lower()] = v[1:-1] if v.startswith('"') else v
    name = fields.get("name")
    if not name:
        raise ValueError("--add-scram: you must supply 'name' to add-scram")
    iterations = int(fields.get("iterations", 4096))
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"--add-scram: iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
    if "password" in fields:
        salt = base64.b64decode(fields["salt"]) if "salt" in fields else None
        cred = make_credential(mech, fields["password"], iterations, salt)
    elif "saltedpassword" in fields and "salt" in fields:
        cred = credential_from_salted(MECHANISMS[mech][1], base64.b64decode(fields["saltedpassword"]),
                                      base64.b64decode(fields["salt"]), iterations)
    else:
        raise ValueError("--add-scram: supply 'password', or 'salt' and 'saltedpassword'")
    return UserScramCredentialRecord(name=name, mechanism=MECHANISMS[mech][0], salt=cred.salt,
                                     stored_key=cred.stored_key, server_key=cred.server_key, iterations=iterations)


def write(metadata_dir: str, records: list) -> None:
    path = os.path.join(metadata_dir, FILE)
    tmp = path + ".tmp"
    # owner-only from creation: the file holds SCRAM keys (chmod after writing left a window)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        for r in records:
            data = encode_record(r)
            f.write(struct.pack(">i", len(data)) + data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o600)   # a stale tmp file from an earlier run keeps its own mode under O_CREAT
    os.replace(tmp, path)


def read(metadata_dir: str) -> list:
    try:
        with open(os.path.join(metadata_dir, FILE), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    out, pos = [], 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack_from(">i", data, pos)
        out.append(decode_record(data[pos + 4:pos + 4 + n]))
        pos += 4 + n
    return out
