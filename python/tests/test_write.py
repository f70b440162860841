"""Writing events from Python (builders and the raw-file writer), read back by Python and by
the Rust binary (`rodeo verify`, `rodeo dump --json`)."""

import numpy as np
import pytest

import rodeo


def make_event(gid, nrobs=4):
    robs = []
    for i in range(nrobs):
        source = 0x00410000 + i
        data = np.array(
            [rodeo.counter_word(source, gid, k) for k in range(10 + 7 * i)], dtype=np.uint32
        )
        robs.append(rodeo.build_rob(source, data, run_number=77, l1id=gid, bcid=gid % 3564,
                                    checksum="crc16"))
    return rodeo.build_event(robs, global_id=gid, run_number=77, bcid=gid % 3564,
                             lumi_block=gid // 10, stream_tags=[("express", "express"),
                                                                ("physics_Main", "physics")])


def test_build_rob_and_event_parse_back():
    data = np.arange(5, dtype=np.uint32)
    rob_words = rodeo.build_rob(0x00110003, data, l1id=9, bcid=12, status=[0, 7])
    rob = rodeo.Rob(rob_words)
    assert rob.source_id == 0x00110003 and rob.subdetector == 0x11 and rob.module == 3
    assert rob.status_words == [0, 7]
    np.testing.assert_array_equal(rob.data, data)
    rob.verify_checksum()
    ev = rodeo.Event(rodeo.build_event([rob_words, rob], global_id=(5 << 32) | 9, bcid=12,
                                       l1_info=[1, 2, 3], checksum="none"))
    assert ev.global_id == (5 << 32) | 9 and ev.l1id == 9 and ev.bcid == 12
    np.testing.assert_array_equal(ev.l1_info, [1, 2, 3])
    assert ev.checksum_type == "none"
    assert [r.source_id for r in ev.robs] == [0x00110003, 0x00110003]
    ev.verify_checksum()


def test_bad_inputs_are_refused():
    with pytest.raises(TypeError, match="uint32"):
        rodeo.Event(np.arange(10, dtype=np.int64))
    with pytest.raises(ValueError, match="contiguous"):
        rodeo.Event(rodeo.synth_event(1, robs=2)[::2])
    with pytest.raises(ValueError, match="whole number of 32-bit words"):
        rodeo.Event(b"\x01\x02\x03")
    good = rodeo.build_rob(1, np.zeros(3, dtype=np.uint32))
    bad = good.copy()
    bad[0] = 0x12345678
    with pytest.raises(rodeo.FormatError, match="ROB 1"):
        rodeo.build_event([good, bad], global_id=1)
    with pytest.raises(rodeo.FormatError):
        rodeo.build_event([good[:-1]], global_id=1)
    with pytest.raises(ValueError, match="checksum"):
        rodeo.build_rob(1, good, checksum="md5")


def test_write_then_read_round_trip(tmp_path, run_rodeo, dump_json):
    events = [make_event(g) for g in range(12)]
    with rodeo.Writer(tmp_path, run=77, stream="express", app="pytest",
                      max_events_per_file=5, fsync=False) as w:
        for i, e in enumerate(events):
            # Arrays, bytes and Event objects are all accepted.
            if i % 3 == 0:
                loc = w.write(e)
            elif i % 3 == 1:
                loc = w.write(e.tobytes())
            else:
                loc = w.write(rodeo.Event(e))
            assert loc[2] == i % 5
        assert w.stats["events"] == 12
        assert len(w.files) == 2  # rotated after 5 and 10 events; the third file is open
    files = w.close()
    assert [p.rsplit("/", 1)[1] for p in files] == [
        f"00000077.express.pytest.{s:04}.data" for s in (1, 2, 3)
    ]
    back = []
    for p in files:
        run_rodeo("verify", p)  # the Rust binary accepts the Python-written files
        ref = dump_json(p)
        with rodeo.open(p) as f:
            assert (f.run, f.stream, f.app_name) == (77, "express", "pytest")
            for ev, r in zip(f, ref["events"]):
                assert ev.global_id == r["global_id"]
                assert [rob.source_id for rob in ev.robs] == [x["source_id"] for x in r["robs"]]
                back.append(ev)
    assert len(back) == 12
    for ev, words in zip(back, events):
        np.testing.assert_array_equal(ev.words, words)
        assert ev.stream_tags == [("express", "express"), ("physics_Main", "physics")]
        for rob in ev.robs:
            assert rodeo.check_counter(rob.data, rob.source_id, ev.l1id) is None


def test_replay_a_generated_file(gen_events, tmp_path, run_rodeo):
    [src] = gen_events(15, robs=6)
    out = tmp_path / "replay"
    out.mkdir()
    with rodeo.Writer(out, run=1, stream="replay", fsync=False) as w, rodeo.open(src) as f:
        for ev in f:
            w.write(ev)
    [dst] = w.files
    run_rodeo("verify", dst)
    pairs = zip(rodeo.open(src), rodeo.open(dst))
    assert all(np.array_equal(a.words, b.words) for a, b in pairs)
    assert rodeo.verify(dst)["events"] == 15


def test_writer_refuses_bad_names_and_writes_after_close(tmp_path):
    with pytest.raises(ValueError, match="stream_name"):
        rodeo.Writer(tmp_path, stream="a.b")
    w = rodeo.Writer(tmp_path, fsync=False)
    w.write(make_event(1))
    assert w.current_path.endswith(".writing")
    files = w.close()
    assert len(files) == 1 and w.close() == files
    with pytest.raises(ValueError, match="closed"):
        w.write(make_event(2))


def test_writer_creates_its_directory(tmp_path):
    out = tmp_path / "missing" / "dir"
    with rodeo.Writer(out, fsync=False) as w:
        w.write(make_event(1))
    assert len(w.files) == 1 and w.files[0].startswith(str(out))
    assert rodeo.verify(w.files[0])["events"] == 1
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError, match="cannot create the directory"):
        rodeo.Writer(blocker / "sub")


def test_unclosed_writer_leaves_a_recoverable_file(tmp_path):
    w = rodeo.Writer(tmp_path, fsync=False)
    for g in range(4):
        w.write(make_event(g))
    path = w.current_path
    # Read the .writing file while it has no end record (the buffer is flushed per file, so
    # only what reached the file is there: at least nothing invalid).
    del w  # dropped without close: like a crash, the file stays .writing without an end record
    import gc

    gc.collect()
    got = []
    with pytest.raises(rodeo.RawFileError, match="no end record"):
        for ev in rodeo.open(path):
            got.append(ev.global_id)
    assert got == [0, 1, 2, 3]
