"""benchmarks/trace_fsync_rounds.py: a round's phases and who held the CPU, from perf script
lines (written here by hand in perf's format; the live recording needs root and perf)."""

import collections

from benchmarks.trace_fsync_rounds import Timeline, parse, report, rounds_of

# one round submitted by the loop (tid 100) on CPU 1; its worker (tid 7) waits 100 us after the
# flush while the loop runs, then ends; the loop reaps 20 us later
TRACE = """\
 python   100 [001]  10.000000: syscalls:sys_enter_io_submit: ctx_id: 0x1, nr: 0x1
 python   100 [001]  10.000006: syscalls:sys_exit_io_submit: 0x1
 python   100 [001]  10.000008: sched:sched_switch: prev_comm=python prev_pid=100 prev_prio=120 prev_state=R ==> next_comm=kworker/1:1 next_pid=7 next_prio=120
 kworker/1:1     7 [001]  10.000010: workqueue:workqueue_execute_start: work struct 0xf: function aio_fsync_work
 kworker/1:1     7 [001]  10.000020: block:block_rq_issue: 254,0 WS 16384 () 8 + 32 [kworker/1:1]
 kworker/1:1     7 [001]  10.000021: sched:sched_switch: prev_comm=kworker/1:1 prev_pid=7 prev_prio=120 prev_state=D ==> next_comm=python next_pid=100 next_prio=120
 python   100 [001]  10.000080: block:block_rq_complete: 254,0 WS () 8 + 32 [0]
 kworker/1:1H    58 [001]  10.000090: block:block_rq_issue: 254,0 FF 0 () 0 + 0 [kworker/1:1H]
 python   100 [001]  10.000120: block:block_rq_complete: 254,0 FF () 0 + 0 [0]
 python   100 [001]  10.000220: sched:sched_switch: prev_comm=python prev_pid=100 prev_prio=120 prev_state=R ==> next_comm=kworker/1:1 next_pid=7 next_prio=120
 kworker/1:1     7 [001]  10.000225: workqueue:workqueue_execute_end: work struct 0xf: function aio_fsync_work
 kworker/1:1     7 [001]  10.000226: sched:sched_switch: prev_comm=kworker/1:1 prev_pid=7 prev_prio=120 prev_state=S ==> next_comm=python next_pid=100 next_prio=120
 python   100 [001]  10.000245: syscalls:sys_enter_io_getevents: ctx_id: 0x1
"""


def test_a_round_is_split_into_its_phases():
    (r,) = rounds_of(parse(TRACE.splitlines()))
    assert r["cpu"] == r["work_cpu"] == 1
    assert round(r["work_start"] - r["submit"]) == 10
    assert round(r["write_done"] - r["write_issue"]) == 60
    assert round(r["flush_issue"] - r["write_done"]) == 10
    assert round(r["flush_done"] - r["flush_issue"]) == 30
    assert round(r["work_end"] - r["flush_done"]) == 105
    assert round(r["reaped"] - r["submit"]) == 245


def test_the_wait_after_the_flush_is_charged_to_the_task_that_had_the_cpu():
    events = parse(TRACE.splitlines())
    (r,) = rounds_of(events)
    acc = collections.Counter()
    Timeline(events).add(1, r["flush_done"], r["work_end"], acc)
    assert round(acc["python (100)"]) == 100
    assert round(acc["kworker/1:1 (7)"]) == 5


def test_the_report_names_the_phases_and_the_loop():
    text = report(parse(TRACE.splitlines()))
    assert "1 rounds; the kernel worker ran on the CPU that submitted the round in 1 of them" in text
    assert "| flush done -> worker ends | 1 | 105 | 105 | 105 |" in text
    assert "flush done -> worker ends: python (100) 95%" in text


def test_no_rounds_says_so():
    assert "no fsync rounds" in report([])
