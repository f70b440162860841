"""Compressed events (zstd, compression type 1) written by `rodeo run`'s logger, read from Python."""

import pathlib

import numpy as np
import pytest

import rodeo


@pytest.fixture(scope="module")
def compressed_run(run_rodeo, tmp_path_factory):
    """Files of a short `rodeo run` whose logger compresses events with zstd."""
    d = tmp_path_factory.mktemp("zstd")
    cfg = d / "zstd.toml"
    text = run_rodeo("config", "default").stdout
    text = text.replace('compression = "none"', 'compression = "zstd"')
    assert 'compression = "zstd"' in text
    cfg.write_text(text)
    run_rodeo("run", "--config", cfg, "--events", 3000, "--output", d / "out", "--json")
    files = sorted(pathlib.Path(d / "out").rglob("*.data"))
    assert files, "the run wrote no file"
    return files


def test_compressed_events_are_read_decompressed(compressed_run):
    n = 0
    for path in compressed_run:
        with rodeo.open(path) as f:
            for ev in f:
                assert ev.flags & 1, "the record should be flagged compressed"
                assert not ev.compressed
                assert ev.compression == 0
                ev.verify_checksum()
                assert ev.robs, "a decompressed event has its ROBs"
                for rob in ev.robs:
                    rob.verify_checksum()
                n += 1
    assert n > 0


def test_decompress_on_demand_gives_the_same_event(compressed_run):
    path = compressed_run[0]
    with rodeo.open(path) as plain, rodeo.open(path, decompress=False) as raw:
        for a, b in zip(plain, raw):
            assert b.compressed and b.compression == 1
            assert b.l1id == a.l1id and b.global_id == a.global_id
            with pytest.raises(rodeo.FormatError):
                b.robs
            c = b.decompress()
            assert not c.compressed
            np.testing.assert_array_equal(np.asarray(c.words), np.asarray(a.words))
            assert len(b.words) < len(a.words), "zstd should shrink the counter payloads"


def test_plain_event_decompress_is_itself(gen_events):
    path = gen_events(3)[0]
    with rodeo.open(path) as f:
        ev = next(iter(f))
        assert ev.decompress() is ev
