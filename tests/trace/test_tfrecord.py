"""TFRecord framing (``trace/tfrecord.py``): the masked CRC-32C of TensorBoard's event files, one at
a time and many at once in numpy, and the walk to the records whose data hold a pattern. Checksums
are checked against the published CRC-32C vectors and a bit-by-bit reference written here;
records are framed by hand (length, its masked CRC, data, the data's masked CRC), then corrupted,
cut short and given lengths no file holds.
"""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest

from tb_attn_plugin.trace.tfrecord import Found, checked, find_records, masked_crc32c, masked_crc32c_many

HIT = re.compile(rb"HIT")


def _crc32c(data: bytes) -> int:
    """CRC-32C one bit at a time (reflected polynomial 0x82F63B78, init and final XOR 0xFFFFFFFF)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _masked(crc: int) -> int:
    """TFRecord's mask: rotate right by 15 bits, add 0xA282EAD8, modulo 2**32."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _record(data: bytes, *, length: int | None = None, bad_length_crc: bool = False, bad_data_crc: bool = False
            ) -> bytes:
    """One record: 8-byte little-endian length, its masked CRC, the data, the data's masked CRC."""
    header = struct.pack("<Q", len(data) if length is None else length)
    length_crc = _masked(_crc32c(header)) ^ (1 if bad_length_crc else 0)
    data_crc = _masked(_crc32c(data)) ^ (1 if bad_data_crc else 0)
    return header + struct.pack("<I", length_crc) + data + struct.pack("<I", data_crc)


def _starts(*records: bytes) -> list[int]:
    """Where each record's data starts in their concatenation (12 bytes after the record's start)."""
    out, pos = [], 0
    for r in records:
        out.append(pos + 12)
        pos += len(r)
    return out


# -- checksums ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("data", "crc"), [
    (b"123456789", 0xE3069283),  # the check value of CRC-32C
    (bytes(32), 0x8A9136AA),  # RFC 3720 (iSCSI), appendix B.4
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
    (b"", 0),
])
def test_the_checksum_is_crc32c_masked(data: bytes, crc: int) -> None:
    assert _crc32c(data) == crc  # the reference itself, against the published values
    assert masked_crc32c(data) == _masked(crc)
    assert masked_crc32c_many(data, [0], [len(data)]).tolist() == [_masked(crc)]


def test_the_mask_of_an_empty_records_crc_is_the_mask_constant() -> None:
    # CRC-32C of nothing is 0: rotated it stays 0, plus 0xA282EAD8.
    assert masked_crc32c(b"") == 0xA282EAD8


def test_many_checksums_at_once_equal_one_at_a_time() -> None:
    """Lengths around the 64-byte pieces and their power-of-two joins, at unaligned, overlapping
    and unordered starts."""
    blob = bytes((i * 37 + 11) % 251 for i in range(6000))
    lengths = [0, 1, 2, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000, 4097]
    starts = [(13 * i + 5) % 1500 for i in range(len(lengths))][::-1]
    lengths = lengths[::-1]
    want = [_masked(_crc32c(blob[s:s + n])) for s, n in zip(starts, lengths, strict=True)]
    got = masked_crc32c_many(blob, np.array(starts), np.array(lengths))
    assert got.dtype == np.uint32 and got.tolist() == want
    assert masked_crc32c_many(memoryview(bytearray(blob)), starts, lengths).tolist() == want


def test_no_records_have_no_checksums() -> None:
    got = masked_crc32c_many(b"abc", [], [])
    assert got.dtype == np.uint32 and got.size == 0


# -- finding records ---------------------------------------------------------------------------
def test_the_records_holding_the_pattern_are_found_with_their_stored_checksums() -> None:
    records = [_record(b"no"), _record(b"a HIT here"), _record(b"none"), _record(b"HIT"), _record(b"after")]
    data = b"".join(records)
    found = find_records(data, HIT, max_bytes=1 << 20)
    starts = _starts(*records)
    assert found.starts == [starts[1], starts[3]] and found.lengths == [10, 3]
    assert found.crcs == [_masked(_crc32c(b"a HIT here")), _masked(_crc32c(b"HIT"))]
    assert (found.too_large, found.cut, found.timed_out) == (0, False, False)
    assert list(checked(data, found)) == [(starts[1], 10, True), (starts[3], 3, True)]


def test_no_match_is_no_records() -> None:
    assert find_records(_record(b"abc") * 3, HIT, max_bytes=100) == Found()
    assert find_records(b"", HIT, max_bytes=100) == Found()


def test_a_match_across_two_records_is_in_neither() -> None:
    # "HI" ends the first record's data; the next bytes are its checksum and the next header.
    first, second = _record(b"xxHI"), _record(b"T and more")
    found = find_records(first + second + b"HIT", HIT, max_bytes=100)
    assert found.starts == []


def test_a_record_over_max_bytes_is_counted_not_listed() -> None:
    records = [_record(b"HIT" + b"x" * 97), _record(b"HIT")]
    found = find_records(b"".join(records), HIT, max_bytes=99)
    # 100 bytes of data over a limit of 99: left out and counted; 3 bytes: listed.
    assert found.too_large == 1 and found.lengths == [3] and found.starts == [_starts(*records)[1]]


def test_a_wrong_length_checksum_ends_the_walk() -> None:
    records = [_record(b"HIT 1"), _record(b"HIT 2", bad_length_crc=True), _record(b"HIT 3")]
    found = find_records(b"".join(records), HIT, max_bytes=100)
    # After a length that cannot be trusted, no record boundary is known: the third is lost.
    assert found.starts == [12] and found.cut


def test_a_wrong_data_checksum_is_found_and_fails_the_check() -> None:
    records = [_record(b"HIT good"), _record(b"HIT bad", bad_data_crc=True), _record(b"HIT good too")]
    data = b"".join(records)
    found = find_records(data, HIT, max_bytes=100)
    assert not found.cut and len(found.starts) == 3
    assert [ok for _, _, ok in checked(data, found)] == [True, False, True]


@pytest.mark.parametrize("cut", [1, 4, 5, 12, 20, 35])
def test_a_record_cut_short_ends_the_walk_quietly(cut: int) -> None:
    """A file still being written: the last record lacks its last ``cut`` bytes (checksum, data,
    or all but part of its header)."""
    whole, last = _record(b"HIT first"), _record(b"HIT second, being written")
    found = find_records(whole + last[:-cut], HIT, max_bytes=100)
    assert found.starts == [12] and not found.cut


@pytest.mark.parametrize("length", [2**63, 2**64 - 1, 1 << 40])
def test_a_huge_length_with_a_right_checksum_is_read_as_cut_short(length: int) -> None:
    """A length no file holds, whose own checksum is right: the walk stops there, reading and
    allocating nothing for it."""
    data = _record(b"HIT") + _record(b"HIT never this", length=length)
    found = find_records(data, HIT, max_bytes=1 << 20)
    assert found.starts == [12] and not found.cut and found.too_large == 0


def test_a_huge_length_with_a_wrong_checksum_is_a_cut() -> None:
    data = _record(b"HIT") + _record(b"HIT", length=2**64 - 1, bad_length_crc=True)
    found = find_records(data, HIT, max_bytes=100)
    assert found.starts == [12] and found.cut


def test_garbage_and_zeros_are_no_records() -> None:
    # Zeros: length 0, whose masked CRC is not 0, so the first header is already wrong.
    assert masked_crc32c(bytes(8)) != 0
    found = find_records(bytes(64) + b"HIT", HIT, max_bytes=100)
    assert found.starts == [] and found.cut
    assert find_records(b"HIT", HIT, max_bytes=100) == Found()  # shorter than a header


def test_a_run_of_filler_records_is_stepped_over_to_the_match() -> None:
    filler = _record(b"filler")
    records = [filler] * 1000 + [_record(b"HIT at last")]
    found = find_records(b"".join(records), HIT, max_bytes=100)
    # 1000 records of 22 bytes (12 + 6 + 4), then the match's data 12 bytes into the next.
    assert found.starts == [1000 * 22 + 12] and found.lengths == [11] and not found.cut


def test_copies_of_a_matching_record_are_walked_in_logarithmic_steps() -> None:
    """200 copies of one matching record, then another: the walk compares runs of records every
    64 records, so copies are reported up to then and the rest of the run is stepped over in
    doubling blocks. By hand: records 0 to 63 are listed; at the 64th the run from record 63 is
    compared in blocks of 1, 2, ... 128 records (256 would pass the end), so the walk goes on at
    record 63 + 128 = 191; records 191 to 199 are listed (9), then the last one: 64 + 9 + 1."""
    copy = _record(b"a HIT")
    data = copy * 200 + _record(b"HIT last")
    found = find_records(data, HIT, max_bytes=100)
    size = len(copy)  # 12 + 5 + 4 = 21
    want = [i * size + 12 for i in range(64)] + [i * size + 12 for i in range(191, 200)] + [200 * size + 12]
    assert found.starts == want
    assert all(data[s:s + 5] == b"a HIT" for s in found.starts[:-1])


def test_a_deadline_passed_stops_the_walk() -> None:
    # Distinct records (no run to step over); the deadline is looked at every 4096 records.
    records = [_record(b"%06d" % i) for i in range(4200)] + [_record(b"HIT")]
    found = find_records(b"".join(records), HIT, max_bytes=100, deadline=0.0)
    assert found.timed_out and found.starts == []
    assert find_records(b"".join(records), HIT, max_bytes=100, deadline=None).starts == [_starts(*records)[-1]]


def test_checks_are_made_in_batches_of_about_batch_bytes() -> None:
    datas = [b"HIT" + bytes([i]) * (10 * i) for i in range(1, 8)]
    datas[4] = datas[4][:-1] + b"?"
    records = [_record(d) for d in datas]
    records[4] = records[4][:-4] + struct.pack("<I", _masked(_crc32c(datas[4][:-1] + b"\x05")))  # the old checksum
    data = b"".join(records)
    found = find_records(data, HIT, max_bytes=1000)
    # Batches of at most 30 bytes of data (one record alone where it is larger): the same answers.
    small = list(checked(data, found, batch_bytes=30))
    assert small == list(checked(data, found))
    assert [(length, ok) for _, length, ok in small] == [(3 + 10 * i, i != 5) for i in range(1, 8)]
