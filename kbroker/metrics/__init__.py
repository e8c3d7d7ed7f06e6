"""Broker metrics on a Prometheus endpoint (``metrics.port``), named after Kafka's JMX metrics
as the Prometheus JMX exporter renders them (``kafka_server_brokertopicmetrics_bytesin_total``).

* ``requests.RequestMetrics``: the only code on the request path; plain counters bumped by the
  dispatcher (a few dict updates per request).
* ``collector.BrokerCollector``: everything else is read from broker state when scraped
  (partition counts, log sizes, consumer lag, quorum state), so it costs nothing until then.
* ``endpoint.MetricsEndpoint``: a tiny HTTP server on the event loop, so a scrape reads broker
  state from the thread that owns it.
"""
