"""Reading `rodeo gen events` files from Python gives the events and ROBs the Rust reader gives
(`rodeo dump --json`), with payloads checked word by word."""

import zlib

import numpy as np
import pytest

import rodeo
from conftest import record_offsets

MASK = 0xFFFFFFFF


def mix(x):
    """The synthetic generator's integer hash, written out again here (test-side only) so the
    payload check does not rest on the code under test."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & MASK
    x ^= x >> 15
    x = (x * 0x846CA68B) & MASK
    return x ^ (x >> 16)


def expected_counter(source, l1id, n):
    rot = ((l1id << 16) | (l1id >> 16)) & MASK
    base = mix(source ^ rot)
    return ((base + np.arange(n, dtype=np.uint64)) & MASK).astype(np.uint32)


CHECKSUM_NAMES = {"none": "None", "crc16": "Crc16", "adler32": "Adler32"}


@pytest.mark.parametrize("checksum", ["none", "crc16", "adler32"])
def test_events_and_robs_match_the_rust_reader(gen_events, dump_json, checksum):
    [path] = gen_events(25, robs=9, checksum=checksum)
    ref = dump_json(path)
    assert ref["returncode"] == 0 and ref["error"] is None
    seen = 0
    with rodeo.open(path) as f:
        assert f.run == ref["start"]["run"] == 1
        assert f.stream == ref["start"]["stream_name"] == "physics_Main"
        assert f.app_name == "rodeo-gen" and f.sequence == 1
        for ev, r in zip(f, ref["events"]):
            seen += 1
            assert (ev.index, ev.offset) == (r["index"], r["offset"])
            assert len(ev.words) == r["size_words"]
            # The words are exactly the record's bytes: their Adler-32 is the record's.
            assert zlib.adler32(ev.words.tobytes()) == r["record_adler32"]
            assert ev.global_id == r["global_id"]
            assert ev.extended_l1id == r["extended_l1id"]
            assert ev.l1id == r["extended_l1id"] & 0xFFFFFF
            assert ev.bcid == r["bcid"]
            assert ev.run_number == r["run_number"]
            assert ev.lumi_block == r["lumi_block"]
            assert ev.status == r["status"]
            assert CHECKSUM_NAMES[ev.checksum_type] == r["checksum_type"]
            assert ev.stream_tags == [(t["name"], t["type"]) for t in r["stream_tags"]]
            ev.verify_checksum()
            assert len(ev.robs) == len(r["robs"]) == 9
            for rob, rr in zip(ev.robs, r["robs"]):
                assert rob.source_id == rr["source_id"]
                assert rob.status == rr["status"]
                assert len(rob.words) == rr["size_words"]
                assert len(rob.data) == rr["data_words"]
                assert rob.extended_l1id == rr["extended_l1id"]
                assert rob.bcid == rr["bcid"]
                assert rob.run_number == rr["run_number"]
                rob.verify_checksum()
                np.testing.assert_array_equal(
                    rob.data, expected_counter(rob.source_id, rob.extended_l1id, len(rob.data))
                )
                assert rodeo.check_counter(rob.data, rob.source_id, rob.extended_l1id) is None
            # The Rust generator called from Python makes the same event.
            np.testing.assert_array_equal(
                ev.words, rodeo.synth_event(ev.global_id, robs=9, checksum=checksum)
            )
        assert f.summary is not None and f.summary["events"] == 25
    assert seen == 25
    assert rodeo.verify(path)["events"] == 25


def test_arrays_are_read_only_views_of_one_buffer(gen_events):
    [path] = gen_events(3, robs=4)
    ev = next(iter(rodeo.open(path)))
    assert ev.words.dtype == np.uint32 and ev.words[0] == 0xAA1234AA
    assert not ev.words.flags.writeable
    with pytest.raises(ValueError):
        ev.words[0] = 1
    for rob in ev.robs:
        assert rob.words[0] == 0xDD1234DD
        assert np.shares_memory(rob.words, ev.words)
        assert np.shares_memory(rob.data, ev.words)
        assert not rob.data.flags.writeable
        assert ev.words[rob.offset] == 0xDD1234DD
    # .robs is built once and then kept.
    assert ev.robs is ev.robs


def test_truncated_file_yields_recoverable_events_then_names_the_offset(gen_events, tmp_path):
    [path] = gen_events(20, robs=5)
    data = path.read_bytes()
    recs = record_offsets(data)
    assert len(recs) == 20
    cut = recs[13] + 37  # inside record 13
    bad = tmp_path / "cut.data"
    bad.write_bytes(data[:cut])
    got = []
    with rodeo.open(bad) as f:
        with pytest.raises(rodeo.RawFileError) as info:
            for ev in f:
                got.append(ev.global_id)
    assert got == list(range(13))
    e = info.value
    assert e.offset == recs[13]
    assert e.events_recovered == 13
    assert f"byte {recs[13]}" in str(e) and f"file ends at byte {cut}" in str(e)
    with pytest.raises(rodeo.RawFileError):
        rodeo.verify(bad)


def test_file_without_end_record_and_bad_checksum(gen_events, tmp_path):
    [path] = gen_events(10, robs=3)
    data = bytearray(path.read_bytes())
    recs = record_offsets(bytes(data))
    # Cut cleanly after record 6: a crash before the end record.
    noend = tmp_path / "noend.data"
    noend.write_bytes(bytes(data[:recs[7]]))
    f = rodeo.open(noend)
    assert sum(1 for _ in _until_error(f)) == 7
    # Flip a payload bit of record 4: its Adler-32 no longer matches.
    data[recs[4] + 16 + 100] ^= 0x10
    flipped = tmp_path / "flipped.data"
    flipped.write_bytes(bytes(data))
    with pytest.raises(rodeo.RawFileError, match=f"event record 4 at byte {recs[4]}: Adler-32"):
        list(rodeo.open(flipped))


def _until_error(f):
    with pytest.raises(rodeo.RawFileError, match="no end record") as info:
        yield from f
    assert info.value.events_recovered == 7


def test_open_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        rodeo.open(tmp_path / "missing.data")
    junk = tmp_path / "junk.data"
    junk.write_bytes(b"\x00" * 64)
    with pytest.raises(rodeo.RawFileError, match="file start record"):
        rodeo.open(junk)
    empty = tmp_path / "empty.data"
    empty.write_bytes(b"")
    with pytest.raises(rodeo.RawFileError) as info:
        rodeo.open(empty)
    assert info.value.offset == 0


def test_closed_file_refuses_iteration(gen_events):
    [path] = gen_events(2, robs=2)
    with rodeo.open(path) as f:
        pass
    with pytest.raises(ValueError, match="closed"):
        next(f)


def test_malformed_fragment_inside_a_good_record():
    words = rodeo.synth_event(3, robs=2).copy()
    words[3] = 0x07000000  # major version 7
    ev = rodeo.Event(words)
    assert len(ev.words) == len(words)
    with pytest.raises(rodeo.FormatError) as info:
        ev.global_id
    assert info.value.word_offset == 3
    assert "malformed" in repr(ev)


def test_start_record_checksum_and_version_1_files(gen_events, dump_json, tmp_path):
    """Files are written in format version 2 (the start record ends in its Adler-32); a flipped
    run-number byte is refused; version-1 files (the old layout, written here by hand) still
    read and verify, their start record marked unchecked."""
    import struct

    [path] = gen_events(5, robs=2)
    data = path.read_bytes()
    with rodeo.open(path) as f:
        assert (f.format_version, f.start["checksummed"]) == (2, True)
    assert dump_json(path)["start"]["checksummed"] is True
    size = struct.unpack_from("<I", data, 4)[0]
    words = struct.unpack_from(f"<{size}I", data, 0)
    assert words[-1] == zlib.adler32(data[:4 * (size - 1)])
    # Byte 24: the run number's low byte.
    flipped = tmp_path / "flipped.data"
    flipped.write_bytes(data[:24] + bytes([data[24] ^ 1]) + data[25:])
    with pytest.raises(rodeo.RawFileError, match="file start record: Adler-32") as info:
        rodeo.open(flipped)
    assert info.value.offset == 0
    # The old layout: version 1, no checksum word, the record one word shorter.
    old = struct.pack(f"<{size - 1}I", 0x1234AAAA, size - 1, 1, *words[3:size - 1])
    v1 = tmp_path / "v1.data"
    v1.write_bytes(old + data[4 * size:])
    with rodeo.open(v1) as f:
        assert (f.format_version, f.start["checksummed"], f.run) == (1, False, 1)
        assert sum(1 for _ in f) == 5
    s = rodeo.verify(v1)
    assert (s["events"], s["start"]["checksummed"]) == (5, False)
