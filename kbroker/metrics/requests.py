"""Request counters the dispatcher bumps: per-API counts and times (Kafka's RequestMetrics),
error codes, and per-topic bytes/messages in and out (BrokerTopicMetrics).

Everything here is a dict update on the event loop; the collector turns the dicts into
Prometheus families at scrape time."""

from __future__ import annotations

import collections

from kbroker.replication.replica_fetch import replica_of

PRODUCE, FETCH = 0, 1
# responses that can hold thousands of entries on a busy path: only the top-level code counts
SHALLOW = frozenset({3, 18})   # Metadata, ApiVersions


def _count_errors(msg, api_key: int, errors) -> None:
    """Every non-zero ``error_code`` in a response, nested entries included (Kafka's
    ``AbstractResponse.errorCounts``)."""
    code = getattr(msg, "error_code", 0)
    if code:
        errors[(api_key, code)] += 1
    for name in msg._FIELDS:
        v = getattr(msg, name, None)
        if type(v) is list and v and hasattr(v[0], "_FIELDS"):
            for item in v:
                _count_errors(item, api_key, errors)
        elif hasattr(v, "_FIELDS"):
            _count_errors(v, api_key, errors)


class TopicCounters:
    __slots__ = ("messages_in", "bytes_in", "bytes_out", "produce_requests", "fetch_requests",
                 "failed_produce", "failed_fetch", "bytes_rejected")

    def __init__(self) -> None:
        self.messages_in = self.bytes_in = self.bytes_out = 0
        self.produce_requests = self.fetch_requests = 0
        self.failed_produce = self.failed_fetch = self.bytes_rejected = 0


class ApiTimes:
    """Sums in milliseconds, like Kafka's RequestMetrics histograms (count + sum here)."""
    __slots__ = ("count", "total", "queue", "local", "remote", "throttle", "response_queue", "response_send")

    def __init__(self) -> None:
        self.count = 0
        self.total = self.queue = self.local = self.remote = self.throttle = 0.0
        self.response_queue = self.response_send = 0.0


class RequestMetrics:
    def __init__(self) -> None:
        self.topics: dict[str, TopicCounters] = collections.defaultdict(TopicCounters)
        self.requests: collections.Counter = collections.Counter()   # (api_key, version)
        self.times: dict[int, ApiTimes] = collections.defaultdict(ApiTimes)
        self.errors: collections.Counter = collections.Counter()     # (api_key, error code)
        self.isr_shrinks = 0      # bumped by replication (kbroker/replication) when it lands
        self.isr_expands = 0

    def observe(self, api_key: int, version: int, req, resp, t0: int, t_local: int, t_end: int,
                throttle_ms: int = 0) -> None:
        """One request done: ``t0`` when dispatched, ``t_local`` when the handler returned,
        ``t_end`` when the response was ready (perf_counter_ns). Remote time is the wait
        after the handler returned (long-poll fetch, controller commits, coordinator writes)."""
        self.requests[(api_key, version)] += 1
        t = self.times[api_key]
        t.count += 1
        t.total += (t_end - t0) / 1e6
        t.local += (t_local - t0) / 1e6
        t.remote += (t_end - t_local) / 1e6
        t.throttle += throttle_ms
        if api_key == PRODUCE:
            self._produce(req, resp)
        elif api_key == FETCH:
            self._fetch(req, resp, version)
        elif resp is not None:
            if api_key in SHALLOW:
                code = getattr(resp, "error_code", 0)
                if code:
                    self.errors[(api_key, code)] += 1
            else:
                _count_errors(resp, api_key, self.errors)

    def records_in(self, topic: str, n: int) -> None:
        """Records appended to ``topic`` by one produce request, as the log counted them while
        validating the batches (so the headers are not parsed a second time here)."""
        self.topics[topic].messages_in += n

    def _produce(self, req, resp) -> None:
        # the handler answers topics and partitions in request order: walk both together
        topics = self.topics
        rtopics = resp.responses if resp is not None else None
        for i, td in enumerate(req.topic_data):
            tc = topics[td.name]
            tc.produce_requests += 1
            rparts = rtopics[i].partition_responses if rtopics is not None else None
            failed = False
            for j, pd in enumerate(td.partition_data):
                recs = pd.records
                if recs is None:
                    continue
                code = rparts[j].error_code if rparts is not None else 0
                if code:
                    self.errors[(PRODUCE, code)] += 1
                    tc.bytes_rejected += len(recs)
                    failed = True
                else:
                    tc.bytes_in += len(recs)   # messages_in: records_in, from the produce handler
            if failed:
                tc.failed_produce += 1

    def _fetch(self, req, resp, version: int) -> None:
        if resp is None:
            return
        if resp.error_code:
            self.errors[(FETCH, resp.error_code)] += 1
        follower = replica_of(req, version)[0] >= 0   # replication traffic is not bytes out
        for t in resp.responses:
            if not t.topic:
                continue
            tc = self.topics[t.topic]
            tc.fetch_requests += 1
            failed = False
            for p in t.partitions:
                if p.error_code:
                    self.errors[(FETCH, p.error_code)] += 1
                    failed = True
                elif not follower:
                    recs = p.records
                    if recs is not None:
                        tc.bytes_out += recs.size if hasattr(recs, "size") else len(recs)
            if failed:
                tc.failed_fetch += 1
