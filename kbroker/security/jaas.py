"""JAAS configuration strings, as Kafka reads ``sasl.jaas.config``.

``<LoginModule class> <flag> key="value" key2=value2 ...;`` (one or more modules). The broker
uses the options: PlainLoginModule's ``user_<name>="<password>"`` entries are the PLAIN users;
OAuthBearer's ``unsecuredLoginStringClaim_sub`` and friends are read by the unsecured validator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TOKEN = re.compile(r'\s*(?:"((?:\\.|[^"\\])*)"|([^\s=;"]+)|(=)|(;))')


@dataclass
class LoginModule:
    class_name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def parse_jaas(text: str) -> list[LoginModule]:
    toks: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            if not text[pos:].strip():
                break
            raise ValueError(f"invalid JAAS config near {text[pos:pos + 20]!r}")
        pos = m.end()
        if m.group(1) is not None:
            toks.append(("str", re.sub(r"\\(.)", r"\1", m.group(1))))
        elif m.group(2) is not None:
            toks.append(("word", m.group(2)))
        elif m.group(3):
            toks.append(("=", "="))
        else:
            toks.append((";", ";"))
    out, i = [], 0
    while i < len(toks):
        if i + 1 >= len(toks) or toks[i][0] != "word" or toks[i + 1][0] != "word":
            raise ValueError("invalid JAAS config: expected '<LoginModule> <flag>'")
        mod = LoginModule(toks[i][1], toks[i + 1][1])
        i += 2
        while i < len(toks) and toks[i][0] != ";":
            if i + 2 >= len(toks) or toks[i + 1][0] != "=":
                raise ValueError("invalid JAAS config: expected key=value")
            mod.options[toks[i][1]] = toks[i + 2][1]
            i += 3
        if i >= len(toks):
            raise ValueError("invalid JAAS config: missing ';'")
        i += 1
        out.append(mod)
    if not out:
        raise ValueError("empty JAAS config")
    return out


def plain_users(modules: list[LoginModule]) -> dict[str, str]:
    users = {}
    for m in modules:
        for k, v in m.options.items():
            if k.startswith("user_"):
                users[k[5:]] = v
    return users
