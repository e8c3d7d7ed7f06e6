"""A fake-clock driver for GroupShard: runs operations, fires due timers, keeps replies."""
from __future__ import annotations

import itertools

from kbroker.groups.classic.messages import HeartbeatRequest, JoinRequest, LeaveMember, SyncRequest
from kbroker.groups.config import GroupConfig
from kbroker.groups.shard import GroupShard


class Token:
    _ids = itertools.count()

    def __init__(self, label=""):
        self.id = next(self._ids)
        self.label = label

    def __repr__(self):
        return f"Token({self.label or self.id})"


class Harness:
    def __init__(self, topics=None, **config):
        defaults = dict(initial_rebalance_delay_ms=0, min_session_timeout_ms=100)
        defaults.update(config)
        ids = itertools.count(1)
        self.topics = dict(topics or {})
        self.shard = GroupShard(0, GroupConfig(**defaults), topics=lambda: self.topics,
                                member_id_factory=lambda prefix: f"{prefix or 'm'}-{next(ids)}")
        self.now = 1_000_000
        self.replies: dict[Token, object] = {}
        self.records: list = []

    def _take(self, res):
        self.records += res.records
        for tok, resp in res.replies:
            assert tok not in self.replies, f"{tok} answered twice"
            self.replies[tok] = resp
        return res

    def run(self, res):
        self._take(res)
        self._take(self.shard.poll(self.now))     # timers due now (e.g. a 0 ms join delay)
        return res

    def advance(self, ms: int, step: int = 10):
        end = self.now + ms
        while self.now < end:
            self.now = min(end, self.now + step)
            self._take(self.shard.poll(self.now))

    # classic helpers ----------------------------------------------------------------------

    def join(self, group="g", member_id="", protocols=(("range", b"r"),), session=1000, rebalance=2000,
             instance=None, version=9, protocol_type="consumer", client_id="c"):
        tok = Token(f"join:{member_id or instance or '?'}")
        req = JoinRequest(group, member_id, protocol_type, list(protocols), session, rebalance,
                          instance, client_id, "/127.0.0.1", version)
        self.run(self.shard.join_group(req, tok, self.now))
        return tok

    def join_new(self, group="g", **kw):
        """v4+ two-step join: MEMBER_ID_REQUIRED, then join with that id. Returns the parked token."""
        first = self.join(group, **kw)
        resp = self.replies[first]
        assert resp.error == 79, resp
        return self.join(group, member_id=resp.member_id, **kw)

    def sync(self, group, member_id, generation, assignments=None, instance=None):
        tok = Token(f"sync:{member_id}")
        self.run(self.shard.sync_group(SyncRequest(group, generation, member_id, dict(assignments or {}),
                                                   instance), tok, self.now))
        return tok

    def heartbeat(self, group, member_id, generation, instance=None):
        return self.run(self.shard.heartbeat(HeartbeatRequest(group, generation, member_id, instance), self.now)).response

    def leave(self, group, *member_ids, instances=None):
        members = [LeaveMember(m) for m in member_ids] + [LeaveMember("", i) for i in instances or []]
        return self.run(self.shard.leave_group(group, members, self.now)).response
