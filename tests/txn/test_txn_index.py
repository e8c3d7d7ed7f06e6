"""The aborted-transaction index: Kafka's 34-byte entries, search, truncation, torn tails."""

import os
import struct

import pytest

from kbroker.txn.txn_index import (
    ENTRY_SIZE,
    AbortedTxn,
    CorruptTxnIndexError,
    TransactionIndex,
    TxnIndexes,
    txn_index_path,
)


def test_entry_format_is_kafkas(tmp_path):
    assert ENTRY_SIZE == 34
    path = txn_index_path(str(tmp_path), 100)
    assert os.path.basename(path) == "00000000000000000100.txnindex"
    idx = TransactionIndex(path, 100)
    assert not os.path.exists(path)  # created on first append
    idx.append(AbortedTxn(7, 90, 120, 95))
    idx.close()
    with open(path, "rb") as f:
        assert f.read() == struct.pack(">hqqqq", 0, 7, 90, 120, 95)


def test_reload_and_order(tmp_path):
    path = txn_index_path(str(tmp_path), 0)
    idx = TransactionIndex(path, 0)
    entries = [AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 20, 21), AbortedTxn(3, 15, 30, 31)]
    for e in entries:
        idx.append(e)
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(4, 1, 30, 31))
    idx.close()
    assert TransactionIndex(path, 0).entries == entries


def test_torn_tail_is_dropped(tmp_path):
    path = txn_index_path(str(tmp_path), 0)
    idx = TransactionIndex(path, 0)
    idx.append(AbortedTxn(1, 0, 10, 11))
    idx.close()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x01")
    again = TransactionIndex(path, 0)
    assert again.entries == [AbortedTxn(1, 0, 10, 11)]
    assert os.path.getsize(path) == ENTRY_SIZE
    again.append(AbortedTxn(2, 11, 12, 13))
    assert TransactionIndex(path, 0).entries[-1] == AbortedTxn(2, 11, 12, 13)


def test_unknown_version_is_corrupt(tmp_path):
    path = txn_index_path(str(tmp_path), 0)
    with open(path, "wb") as f:
        f.write(struct.pack(">hqqqq", 1, 1, 0, 1, 2))
    with pytest.raises(CorruptTxnIndexError):
        TransactionIndex(path, 0)


def test_sanity_check(tmp_path):
    idx = TransactionIndex(txn_index_path(str(tmp_path), 50), 50)
    idx.append(AbortedTxn(1, 0, 40, 41))
    with pytest.raises(CorruptTxnIndexError):
        idx.sanity_check()


def test_collect_overlap_and_completion(tmp_path):
    idx = TransactionIndex(txn_index_path(str(tmp_path), 0), 0)
    idx.append(AbortedTxn(1, 0, 10, 11))
    idx.append(AbortedTxn(2, 5, 20, 12))  # another txn still open at the time: LSO 12
    idx.append(AbortedTxn(3, 25, 30, 31))
    assert idx.collect(11, 15) == ([AbortedTxn(2, 5, 20, 12)], True)
    assert idx.collect(11, 40) == ([AbortedTxn(2, 5, 20, 12), AbortedTxn(3, 25, 30, 31)], False)
    found, complete = idx.collect(0, 26)
    assert [e.producer_id for e in found] == [1, 2, 3] and complete
    assert idx.collect(21, 25) == ([], True)  # stops at the entry whose LSO passes the bound
    assert idx.collect(31, 40) == ([], False)


def test_truncate_to(tmp_path):
    path = txn_index_path(str(tmp_path), 0)
    idx = TransactionIndex(path, 0)
    for i in range(5):
        idx.append(AbortedTxn(i, i * 10, i * 10 + 5, i * 10 + 6))
    idx.truncate_to(25)  # entries with last offset >= 25 go
    assert [e.last_offset for e in idx.entries] == [5, 15]
    assert os.path.getsize(path) == 2 * ENTRY_SIZE
    idx.append(AbortedTxn(9, 20, 22, 23))
    idx.reset()
    assert idx.entries == [] and os.path.getsize(path) == 0


def test_indexes_of_a_partition(tmp_path):
    d = str(tmp_path)
    ix = TxnIndexes(d)
    ix.append(0, AbortedTxn(1, 0, 10, 11))
    ix.append(100, AbortedTxn(2, 90, 105, 106))  # started in the segment before
    ix.append(100, AbortedTxn(3, 110, 120, 121))
    ix.append(200, AbortedTxn(4, 200, 210, 211))
    with pytest.raises(ValueError):
        ix.append(50, AbortedTxn(5, 50, 60, 61))
    # a fetch from the first segment finds the abort whose marker is in the next one
    assert [e.producer_id for e in ix.collect(50, 100)] == [2]
    assert [e.producer_id for e in ix.collect(0, 95)] == [1, 2]
    assert [e.producer_id for e in ix.collect(150, 300)] == [4]
    ix.close()
    again = TxnIndexes(d)
    assert again.bases == [0, 100, 200]
    assert [e.producer_id for e in again.all_aborted()] == [1, 2, 3, 4]
    again.truncate_to(115)
    assert again.bases == [0, 100]
    assert [e.producer_id for e in again.all_aborted()] == [1, 2]
    assert not os.path.exists(txn_index_path(d, 200))
    again.retain_segments([100, 300])
    assert again.bases == [100]
    assert not os.path.exists(txn_index_path(d, 0))
