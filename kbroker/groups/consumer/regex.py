"""Broker-side topic regexes (KIP-848 SubscribedTopicRegex) with Kafka's semantics.

Kafka compiles them with RE2J and subscribes a member to every topic the pattern matches as a
whole (``Pattern.matcher(topic).matches()``); internal topics are left out. We use Python's
``re`` with ``fullmatch``, after translating the RE2 spellings ``re`` lacks and refusing what
RE2 refuses, so a pattern means the same thing and fails the same way:

- translated: ``(?<name>...)`` -> ``(?P<name>...)``, ``\\z`` -> ``\\Z``, ``\\Q...\\E`` literal runs;
- refused (RE2 has no backtracking): lookahead/lookbehind ``(?=`` ``(?!`` ``(?<=`` ``(?<!``,
  backreferences ``\\1``..``\\9`` and ``(?P=name)``, atomic groups ``(?>``, possessive ``*+``.

Remaining differences: RE2's Unicode classes ``\\p{Greek}`` and POSIX ``[[:alpha:]]`` are not
supported (refused, so a client learns it at once); flags and character-class details follow
Python, which agrees with RE2 on the ASCII patterns topic names are made of.
"""
from __future__ import annotations

import re

_REFUSED = [("(?=", "lookahead"), ("(?!", "negative lookahead"), ("(?<=", "lookbehind"),
            ("(?<!", "negative lookbehind"), ("(?P=", "backreference"), ("(?>", "atomic group")]


class RegexError(ValueError):
    pass


def translate(pattern: str) -> str:
    """RE2 syntax -> an equivalent Python ``re`` pattern; RegexError for what RE2 refuses."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            if nxt == "Q":                                    # \Q...\E: literal text
                end = pattern.find("\\E", i + 2)
                end = n if end < 0 else end
                out.append(re.escape(pattern[i + 2:end]))
                i = end + 2
                continue
            if nxt.isdigit() and nxt != "0":
                raise RegexError(f"invalid escape sequence: \\{nxt} (RE2 has no backreferences)")
            if nxt in "pP":
                raise RegexError(f"unsupported Unicode class \\{nxt}")
            out.append("\\Z" if nxt == "z" else pattern[i:i + 2])
            i += 2
            continue
        if c == "(" and pattern.startswith("(?", i):
            for tok, what in _REFUSED:
                if pattern.startswith(tok, i):
                    raise RegexError(f"invalid or unsupported Perl syntax: {what} `{tok}`")
            if pattern.startswith("(?<", i):
                out.append("(?P<")
                i += 3
                continue
        if c in "*+?}" and i + 1 < n and pattern[i + 1] == "+":
            raise RegexError(f"invalid nested repetition operator: `{c}+`")
        if c == "[" and pattern.startswith("[[:", i):
            raise RegexError("unsupported POSIX class")
        out.append(c)
        i += 1
    return "".join(out)


def compile_topic_regex(pattern: str) -> re.Pattern:
    try:
        return re.compile(translate(pattern))
    except re.error as e:
        raise RegexError(str(e)) from None


def matching_topics(pattern: re.Pattern, topics) -> set[str]:
    """Topics the pattern matches as a whole, internal (``__``-prefixed) topics excluded."""
    return {t for t in topics if not t.startswith("__") and pattern.fullmatch(t)}
