"""Principals: Kafka's ``User:<name>`` strings and the SSL principal mapping rules.

``ssl.principal.mapping.rules`` (Kafka's SslPrincipalMapper): a comma-separated list of
``RULE:<regex>/<replacement>/[L|U]`` and ``DEFAULT``; the first rule whose regex matches the
whole distinguished name (RFC 2253 form) gives the name, ``DEFAULT`` keeps the DN as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

USER_TYPE = "User"
ANONYMOUS = "User:ANONYMOUS"


def user(name: str) -> str:
    return f"{USER_TYPE}:{name}"


class NoMatchingRule(ValueError):
    pass


@dataclass(frozen=True)
class MappingRule:
    pattern: re.Pattern | None        # None: DEFAULT
    replacement: str = ""
    case: str = ""                    # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if not self.pattern.fullmatch(dn):
            return None
        out = self.pattern.sub(self.replacement, dn, count=1)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")


def _java_replacement(s: str) -> str:
    # Java's $1 group references -> Python's \g<1>; backslash escapes stay
    return re.sub(r"\$(\d+)", r"\\g<\1>", s)


def parse_mapping_rules(text: str | None) -> list[MappingRule]:
    text = (text or "DEFAULT").strip()
    rules, pos = [], 0
    while pos < len(text):
        m = _RULE.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"Invalid rule in ssl.principal.mapping.rules: {text[pos:]!r}")
        if m.group(1):
            rules.append(MappingRule(None))
        else:
            rules.append(MappingRule(re.compile(m.group(2)), _java_replacement(m.group(3)), m.group(4)))
        pos = m.end()
    return rules


_ATTR = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
         "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
         "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID"}


def _escape(v: str) -> str:
    v = re.sub(r'([,+"\\<>;=])', r"\\\1", v)
    if v[:1] in ("#", " "):
        v = "\\" + v
    if v.endswith(" "):
        v = v[:-1] + "\\ "
    return v


def rfc2253(subject) -> str:
    """The DN of ``ssl.getpeercert()['subject']`` as X500Principal.getName() prints it."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_ATTR.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def ssl_principal_name(subject, rules: list[MappingRule]) -> str:
    dn = rfc2253(subject)
    for rule in rules:
        out = rule.apply(dn)
        if out is not None:
            return out
    raise NoMatchingRule(f"No rule applies to the distinguished name {dn}")
