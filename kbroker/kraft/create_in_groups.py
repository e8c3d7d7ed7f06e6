"""CreateTopics as one controller operation per group of topics, not one for the request.

Every step of an operation's path holds the event loop in proportion to the partitions it
creates: building the records, appending and replaying them, applying the committed batch
to the metadata image (one step, so no reader sees half of it). One request creating ten
topics of 1,000 partitions held it 35-72 ms at each of those steps. In groups of about
``PARTITIONS_PER_OP`` partitions each step stays a few milliseconds.

Kafka does not create a request's topics atomically either: each topic has its own result,
and its controller may split a large operation's records over several batches. A later group
is validated against the image the earlier ones committed (a name taken by an earlier topic
of the request is TOPIC_ALREADY_EXISTS, as within one operation). A request naming a topic
twice stays one operation, so that every entry of the name gets INVALID_REQUEST; so does one
that could reach Kafka's bounds on a request (10,000 partitions, or 10,000 records of the
topics that are valid), which only the whole request can be checked against: the controller
refuses all of it then."""

from __future__ import annotations

from typing import Awaitable, Callable

from kbroker.kraft.controller import MAX_RECORDS_PER_USER_OP, partitions_asked

PARTITIONS_PER_OP = 1000


def groups(topics: list, default_partitions: int, per_op: int = PARTITIONS_PER_OP) -> list[list]:
    """``topics`` cut, in order, into runs of at most ``per_op`` partitions (a larger topic
    alone); all in one run if a name repeats or the request may reach Kafka's bounds (its
    records, valid or not, would be more than MAX_RECORDS_PER_USER_OP)."""
    names = [t.name for t in topics]
    sizes = [partitions_asked(t, default_partitions) for t in topics]
    most_records = sum(1 + len(t.configs) + n for t, n in zip(topics, sizes))
    if len(set(names)) != len(names) or most_records > MAX_RECORDS_PER_USER_OP:
        return [list(topics)] if topics else []
    out: list[list] = []
    run: list = []
    size = 0
    for t, n in zip(topics, sizes):
        if run and size + n > per_op:
            out.append(run)
            run, size = [], 0
        run.append(t)
        size += n
    if run:
        out.append(run)
    return out


async def create_topics(submit: Callable[[Callable], Awaitable], topics: list, validate_only: bool,
                        default_partitions: int) -> list:
    """The results of ``Controller.create_topics`` for ``topics``, in their order, one
    ``submit`` (a controller runtime's) per group. ``default_partitions``: num.partitions."""
    results: list = []
    for run in groups(topics, default_partitions):
        results += await submit(lambda c, now, run=run: c.create_topics(run, validate_only, now))
    return results
