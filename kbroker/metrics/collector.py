"""Scrape-time collector: turns the request counters and the broker's own state into
Prometheus families named as the JMX exporter names Kafka's MBeans
(``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t`` ->
``kafka_server_brokertopicmetrics_bytesin_total{topic="t"}``).

Nothing here runs on the request path: it reads the image, the partitions' logs and the group
coordinator's committed offsets when Prometheus asks."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

from kbroker.wire.errors import error_name
from kbroker.wire.registry import api_name

DLQ_SUFFIX = ".dlq"

# BrokerTopicMetrics meters: (metric suffix, TopicCounters attribute, help)
_TOPIC_METERS = (
    ("messagesin", "messages_in", "Records appended (MessagesInPerSec)"),
    ("bytesin", "bytes_in", "Bytes appended from clients (BytesInPerSec)"),
    ("bytesout", "bytes_out", "Bytes sent to consumers (BytesOutPerSec)"),
    ("bytesrejected", "bytes_rejected", "Bytes of refused produce data (BytesRejectedPerSec)"),
    ("totalproducerequests", "produce_requests", "Produce requests per topic (TotalProduceRequestsPerSec)"),
    ("totalfetchrequests", "fetch_requests", "Fetch requests per topic (TotalFetchRequestsPerSec)"),
    ("failedproducerequests", "failed_produce", "Produce requests with a failed partition (FailedProduceRequestsPerSec)"),
    ("failedfetchrequests", "failed_fetch", "Fetch requests with a failed partition (FailedFetchRequestsPerSec)"),
)

_TIMES = (
    ("totaltimems", "total", "Request total time, ms"),
    ("requestqueuetimems", "queue", "Time in the request queue, ms (0: requests are dispatched as read)"),
    ("localtimems", "local", "Time in the handler, ms"),
    ("remotetimems", "remote", "Time waiting after the handler (long poll, commits), ms"),
    ("throttletimems", "throttle", "Throttle time the answer carried (client quotas), ms"),
    ("responsequeuetimems", "response_queue", "Time in the response queue, ms"),
    ("responsesendtimems", "response_send", "Time sending the response, ms"),
)


class BrokerCollector:
    def __init__(self, broker, requests, loop_lag=None, telemetry=None) -> None:
        self.broker = broker
        self.requests = requests
        self.loop_lag = loop_lag
        self.telemetry = telemetry

    def collect(self):
        yield from self._topic_meters()
        yield from self._request_metrics()
        yield from self._partitions()
        yield from self._replication_throttles()
        yield from self._logs()
        yield from self._flushes()
        yield from self._network()
        yield from self._fetch_sessions()
        yield from self._controller()
        yield from self._group_lag()
        yield from self._dead_letters()
        if self.loop_lag is not None:
            yield from self.loop_lag.families()
        if self.telemetry is not None:
            yield from self.telemetry.families()

    # -- request path counters ----------------------------------------------------------------

    def _topic_meters(self):
        topics = self.requests.topics
        for suffix, attr, doc in _TOPIC_METERS:
            f = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{suffix}", doc, labels=["topic"])
            for name, tc in topics.items():
                f.add_metric([name], getattr(tc, attr))
            yield f

    def _request_metrics(self):
        rm = self.requests
        reqs = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests (RequestsPerSec)",
                                   labels=["request", "version"])
        for (key, ver), n in rm.requests.items():
            reqs.add_metric([api_name(key), str(ver)], n)
        yield reqs
        errs = CounterMetricFamily("kafka_network_requestmetrics_errors", "Error codes in responses (ErrorsPerSec)",
                                   labels=["request", "error"])
        for (key, code), n in rm.errors.items():
            errs.add_metric([api_name(key), error_name(code)], n)
        yield errs
        for suffix, attr, doc in _TIMES:
            f = SummaryMetricFamily(f"kafka_network_requestmetrics_{suffix}", doc, labels=["request"])
            for key, t in rm.times.items():
                f.add_metric([api_name(key)], t.count, getattr(t, attr))
            yield f
        yield CounterMetricFamily("kafka_server_replicamanager_isrshrinks", "ISR shrinks (IsrShrinksPerSec)",
                                  value=rm.isr_shrinks)
        yield CounterMetricFamily("kafka_server_replicamanager_isrexpands", "ISR expands (IsrExpandsPerSec)",
                                  value=rm.isr_expands)

    # -- partitions and logs (scrape time) ----------------------------------------------------

    def _partition_states(self):
        image = self.broker.image
        for t in image.topics_by_name.values():
            for p in t.partitions.values():
                yield t, p

    def _replication_throttles(self):
        """Bytes/s moved for throttled replicas (Kafka's LeaderReplication / FollowerReplication
        byte-rate), over the quota's sample windows."""
        th = getattr(self.broker, "replication_throttles", None)
        if th is None:
            return
        now = self.broker.clock.now_ms()
        yield GaugeMetricFamily("kafka_server_leaderreplication_byte_rate",
                                "Bytes/s this leader sent for throttled replicas", value=th.leader.measured.rate(now))
        yield GaugeMetricFamily("kafka_server_followerreplication_byte_rate",
                                "Bytes/s this follower fetched for throttled replicas",
                                value=th.follower.measured.rate(now))

    def _partitions(self):
        b = self.broker
        node = b.node_id
        live = {bid for bid, r in b.image.brokers.items() if not r.fenced}
        hosted = leaders = under = under_min = at_min = offline = total = 0
        for t, p in self._partition_states():
            total += 1
            if p.leader < 0 or p.leader not in live:
                offline += 1
            if node not in p.replicas:
                continue
            hosted += 1
            if p.leader != node:
                continue
            leaders += 1
            if len(p.isr) < len(p.replicas):
                under += 1
            cfg = b.image.topic_configs(t.name).get("min.insync.replicas")
            min_isr = int(cfg) if cfg else b.config["min.insync.replicas"]
            if len(p.isr) < min_isr:
                under_min += 1
            elif len(p.isr) == min_isr:
                at_min += 1
        g = GaugeMetricFamily
        yield g("kafka_server_replicamanager_partitioncount", "Partitions hosted here", value=hosted)
        yield g("kafka_server_replicamanager_leadercount", "Partitions led here", value=leaders)
        yield g("kafka_server_replicamanager_underreplicatedpartitions", "Led partitions with ISR < replicas", value=under)
        yield g("kafka_server_replicamanager_underminisrpartitioncount", "Led partitions with ISR < min.insync.replicas", value=under_min)
        yield g("kafka_server_replicamanager_atminisrpartitioncount", "Led partitions with ISR == min.insync.replicas", value=at_min)
        yield g("kafka_server_replicamanager_offlinereplicacount", "Hosted replicas whose log is offline", value=0)
        yield g("kafka_controller_kafkacontroller_offlinepartitionscount", "Partitions without a live leader", value=offline)
        yield g("kafka_controller_kafkacontroller_globalpartitioncount", "Partitions in the cluster", value=total)
        yield g("kafka_controller_kafkacontroller_globaltopiccount", "Topics in the cluster", value=len(b.image.topics_by_name))

    def _logs(self):
        size = GaugeMetricFamily("kafka_log_log_size", "Log size in bytes", labels=["topic", "partition"])
        segs = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments in the log", labels=["topic", "partition"])
        leo = GaugeMetricFamily("kafka_log_log_logendoffset", "Log end offset", labels=["topic", "partition"])
        lso = GaugeMetricFamily("kafka_log_log_logstartoffset", "Log start offset", labels=["topic", "partition"])
        replicas = self.broker.replicas
        if replicas is not None:
            for p in replicas.all_partitions():
                lbl = [p.topic, str(p.index)]
                plog = p.log
                size.add_metric(lbl, plog.size_in_bytes)
                segs.add_metric(lbl, plog.num_segments)
                leo.add_metric(lbl, plog.log_end_offset)
                lso.add_metric(lbl, plog.log_start_offset)
        yield from (size, segs, leo, lso)

    def _flushes(self):
        """Kafka's LogFlushRateAndTimeMs timer (count and summed ms of every log fsync), and
        how many appends the group-commit rounds of ``flush.messages=1`` topics answered."""
        lm = getattr(self.broker, "log_manager", None)
        if lm is None:
            return
        st = lm.flush_stats
        f = SummaryMetricFamily("kafka_log_logflushstats_logflushrateandtimems",
                                "Log fsyncs and their time, ms (LogFlushRateAndTimeMs)")
        f.add_metric([], st.flushes, st.flush_ms)
        yield f
        yield CounterMetricFamily("kbroker_log_group_commit_rounds",
                                  "Group-commit fsync rounds (flush.messages=1 topics)", value=st.commit_rounds)
        yield CounterMetricFamily("kbroker_log_group_commit_answers",
                                  "Appends answered by group-commit rounds (per round: this / rounds)",
                                  value=st.commit_answers)

    def _network(self):
        """Kafka's socket-server-metrics per listener: open connections, and connections
        accepted and closed since start."""
        g = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count", "Open connections",
                              labels=["listener"])
        made = CounterMetricFamily("kafka_server_socket_server_metrics_connection_creation",
                                   "Connections accepted", labels=["listener"])
        gone = CounterMetricFamily("kafka_server_socket_server_metrics_connection_close",
                                   "Connections closed", labels=["listener"])
        for lst in getattr(self.broker, "listeners", ()):
            g.add_metric([lst.name], len(lst.connections))
            made.add_metric([lst.name], lst.accepted_total)
            gone.add_metric([lst.name], lst.closed_total)
        yield from (g, made, gone)

    def _fetch_sessions(self):
        """Kafka's FetchSessionCache metrics (KIP-227 incremental fetch sessions)."""
        cache = getattr(self.broker, "fetch_sessions", None)
        if cache is None:
            return
        g = GaugeMetricFamily
        yield g("kafka_server_fetchsessioncache_numincrementalfetchsessions", "Incremental fetch sessions",
                value=len(cache.sessions))
        yield g("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
                "Partitions in all incremental fetch sessions", value=cache.partitions_cached())
        yield CounterMetricFamily("kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
                                  "Sessions evicted to make room (IncrementalFetchSessionEvictionsPerSec)",
                                  value=cache.evictions)

    def _quorum(self):
        """(leader id, epoch, role, log end offset, high watermark, voters) of the metadata
        quorum: the Raft node when the broker runs one (``controller.node``), else the
        single-voter runtime's quorum state."""
        b = self.broker
        ctl = b.controller
        node = getattr(ctl, "node", None)
        if node is not None:
            return (node.leader_id, node.epoch, node.role, node.log.end_offset, node.high_watermark,
                    len(node.voters))
        quorum = getattr(ctl, "quorum", None)
        mlog = getattr(ctl, "mlog", None)
        leader = getattr(quorum, "leader_id", -1)
        end = mlog.end_offset if mlog is not None else -1
        return (leader, getattr(quorum, "epoch", -1), "leader" if leader == b.node_id else "unattached", end, end,
                max(1, len(b.config.voters)))

    def _controller(self):
        b = self.broker
        leader, epoch, role, end, hw, voters = self._quorum()
        active = getattr(b.controller, "active", None)
        if active is None:
            active = leader == b.node_id
        g = GaugeMetricFamily
        yield g("kafka_controller_kafkacontroller_activecontrollercount",
                "1 on the active controller", value=1 if active else 0)
        yield g("kafka_controller_kafkacontroller_activebrokercount", "Unfenced brokers",
                value=sum(1 for r in b.image.brokers.values() if not r.fenced))
        yield g("kafka_controller_kafkacontroller_fencedbrokercount", "Fenced brokers",
                value=sum(1 for r in b.image.brokers.values() if r.fenced))
        yield g("kafka_server_raft_metrics_current_leader", "Metadata quorum leader id", value=leader)
        yield g("kafka_server_raft_metrics_current_epoch", "Metadata quorum epoch", value=epoch)
        state = g("kafka_server_raft_metrics_current_state", "1 for this node's quorum role", labels=["state"])
        for s in ("leader", "prospective", "candidate", "follower", "unattached", "resigned", "observer"):
            state.add_metric([s], 1 if s == role else 0)
        yield state
        yield g("kafka_server_raft_metrics_log_end_offset", "Metadata log end offset", value=end)
        yield g("kafka_server_raft_metrics_high_watermark", "Metadata log high watermark", value=hw)
        yield g("kafka_server_raft_metrics_number_of_voters", "Voters in the metadata quorum", value=voters)
        yield g("kafka_server_metadata_image_offset", "Offset of the last applied metadata record", value=b.image.offset)

    # -- consumer groups ------------------------------------------------------------------------

    def _group_lag(self):
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Log end offset minus committed offset",
                                labels=["consumergroup", "topic", "partition"])
        cur = GaugeMetricFamily("kafka_consumergroup_current_offset", "Committed offset",
                                labels=["consumergroup", "topic", "partition"])
        total = GaugeMetricFamily("kafka_consumergroup_lag_sum", "Lag summed over a group's partitions",
                                  labels=["consumergroup"])
        groups = getattr(self.broker, "groups", None)
        replicas = self.broker.replicas
        if groups is not None and replicas is not None:
            for shard in list(groups.shards.values()):
                for gid, offsets in shard.offsets.offsets.items():
                    s = 0
                    for (topic, part), ov in offsets.items():
                        p = replicas.get(topic, part)
                        lbl = [gid, topic, str(part)]
                        cur.add_metric(lbl, ov.offset)
                        if p is not None:
                            n = max(0, p.high_watermark - ov.offset)
                            lag.add_metric(lbl, n)
                            s += n
                    total.add_metric([gid], s)
        yield from (lag, cur, total)

    def _dead_letters(self):
        """Records parked in ``<topic>.dlq`` topics (kbroker.dlq): per original topic."""
        f = GaugeMetricFamily("kbroker_dlq_records", "Records in a dead-letter topic (log end - log start)",
                              labels=["topic", "dlq_topic"])
        parked = CounterMetricFamily("kbroker_dlq_messagesin", "Records parked since start", labels=["topic", "dlq_topic"])
        replicas = self.broker.replicas
        if replicas is not None:
            counts: dict[str, int] = {}
            for p in replicas.all_partitions():
                if p.topic.endswith(DLQ_SUFFIX):
                    counts[p.topic] = counts.get(p.topic, 0) + p.log.log_end_offset - p.log.log_start_offset
            for dlq, n in counts.items():
                f.add_metric([dlq[:-len(DLQ_SUFFIX)], dlq], n)
                tc = self.requests.topics.get(dlq)
                parked.add_metric([dlq[:-len(DLQ_SUFFIX)], dlq], tc.messages_in if tc else 0)
        yield f
        yield parked
