"""Dead-letter queues: park a record a consumer cannot process in ``<topic>.dlq`` with the
context an operator needs, inspect the parked records, replay the fixed ones.

* ``kbroker.dlq.publisher``: the client-side helper for a consumer application
  (``DeadLetterPublisher.park``, ``process_with_retries``), works with a confluent-kafka
  (or any duck-typed) producer and message.
* ``kbroker dlq inspect|replay`` (``kbroker.tools.dlq``): the operator's side.
* The broker counts parked records per topic in its metrics (``kbroker_dlq_records``)."""

from kbroker.dlq.headers import (ATTEMPTS, ERROR, ORIGINAL_OFFSET, ORIGINAL_PARTITION,  # noqa: F401
                                 ORIGINAL_TIMESTAMP, ORIGINAL_TOPIC, PARKED_AT, REPLAY_COUNT, SUFFIX)
from kbroker.dlq.publisher import DeadLetterPublisher, process_with_retries  # noqa: F401
