"""Topic regexes with RE2J's meaning (what Kafka compiles SubscribedTopicRegex with)."""
import uuid

import pytest

from kbroker.groups import errors as E
from kbroker.groups.consumer.regex import RegexError, compile_topic_regex, matching_topics, translate

from tests.groups.test_consumer_protocol import hb, join
from tests.groups.harness import Harness

TOPICS = ["orders", "orders-eu", "orders.us", "payments", "__consumer_offsets", "a+b"]


@pytest.mark.parametrize("pattern,want", [
    ("orders.*", {"orders", "orders-eu", "orders.us"}),
    ("orders", {"orders"}),                            # a whole-name match, not a search
    ("rders", set()),
    ("orders\\.us|pay.*", {"orders.us", "payments"}),
    ("(?<r>orders)-eu", {"orders-eu"}),                # Java/RE2 named group
    ("\\Qa+b\\E", {"a+b"}),                            # RE2 literal run
    ("orders\\z", {"orders"}),
    (".*", {"orders", "orders-eu", "orders.us", "payments", "a+b"}),   # never internal topics
])
def test_matching(pattern, want):
    assert matching_topics(compile_topic_regex(pattern), TOPICS) == want


@pytest.mark.parametrize("pattern", ["(?=x)a", "(?!x)a", "(?<=x)a", "(?<!x)a", "(a)\\1", "(?P<n>a)(?P=n)",
                                     "a*+", "(?>a)", "\\p{Greek}", "[[:alpha:]]", "(", "[a"])
def test_refused_like_re2(pattern):
    with pytest.raises(RegexError):
        compile_topic_regex(pattern)


def test_escapes_pass_through():
    assert translate("a\\.b\\d+[x-z]") == "a\\.b\\d+[x-z]"


def test_heartbeat_refuses_a_pattern_re2_refuses_and_follows_new_topics():
    T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
    h = Harness(topics={"orders": (T1, 2), "other": (T2, 1)})
    r = hb(h, "a", 0, [], {}, regex="(?=o)orders")
    assert r.error == E.INVALID_REGULAR_EXPRESSION
    r = join(h, "a", topics=(), regex="ord.*")
    assert r.assignment == {T1: [0, 1]}
    T3 = uuid.UUID(int=3)
    h.topics["orders-2"] = (T3, 1)                     # created after the subscription
    r = hb(h, "a", r.member_epoch)
    assert r.assignment == {T1: [0, 1], T3: [0]}
