"""Shared fixtures: the `rodeo` binary (for `gen events`, `dump --json`, `verify`) and files."""

import json
import os
import pathlib
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _find_rodeo():
    """RODEO_BIN, else a built binary in target/, else build the debug one with cargo."""
    env = os.environ.get("RODEO_BIN")
    if env:
        return pathlib.Path(env)
    for profile in ("debug", "release"):
        p = ROOT / "target" / profile / "rodeo"
        if p.exists():
            return p
    subprocess.run(
        ["cargo", "build", "-p", "rodeo", "--locked"], cwd=ROOT, check=True, timeout=1800
    )
    return ROOT / "target" / "debug" / "rodeo"


def wait_for(what, limit_s, f, poll_s=0.05):
    """Calls `f` until it returns something other than None or False and returns that; fails
    naming `what` (and the last value) after `limit_s` seconds. The tests' only sleep: the poll
    interval of this bounded wait, never a fixed wait for something to happen."""
    deadline = time.monotonic() + limit_s
    last = None
    while True:
        last = f()
        if last is not None and last is not False:
            return last
        assert time.monotonic() < deadline, f"timed out after {limit_s} s waiting for {what}: {last!r}"
        time.sleep(poll_s)


@pytest.fixture(scope="session")
def rodeo_bin():
    p = _find_rodeo()
    assert p.exists(), f"no rodeo binary at {p}"
    return p


@pytest.fixture(scope="session")
def run_rodeo(rodeo_bin):
    """Runs `rodeo ARGS...`; returns the CompletedProcess (text mode)."""

    def run(*args, check=True):
        out = subprocess.run(
            [str(rodeo_bin), *map(str, args)], capture_output=True, text=True, timeout=300
        )
        if check and out.returncode != 0:
            raise AssertionError(f"rodeo {args} failed ({out.returncode}): {out.stderr}")
        return out

    return run


@pytest.fixture(scope="session")
def gen_events(run_rodeo, tmp_path_factory):
    """`gen_events(count, robs=8, checksum="adler32", **extra)` -> list of file paths."""

    def gen(count, robs=8, checksum="adler32", **extra):
        out_dir = tmp_path_factory.mktemp("gen")
        args = ["gen", "events", "--count", count, "--robs", robs, "--checksum", checksum,
                "--output", out_dir, "--json"]
        for k, v in extra.items():
            args += ["--" + k.replace("_", "-"), v]
        summary = json.loads(run_rodeo(*args).stdout)
        assert summary["events"] == count
        return [pathlib.Path(f) for f in summary["files"]]

    return gen


@pytest.fixture(scope="session")
def dump_json(run_rodeo):
    """`rodeo dump --json FILE` parsed; the exit code in the dict as `returncode`."""

    def dump(path):
        out = run_rodeo("dump", path, "--json", check=False)
        d = json.loads(out.stdout)
        d["returncode"] = out.returncode
        return d

    return dump


def record_offsets(data: bytes):
    """Byte offsets of the event records of a raw-data file, by walking the size words (an
    independent reading of the record layout, not the reader under test)."""
    word = lambda at: int.from_bytes(data[at:at + 4], "little")  # noqa: E731
    at = word(4) * 4
    offsets = []
    while at + 8 <= len(data) and word(at) == 0x1234CCCC:
        offsets.append(at)
        at += word(at + 4) * 4
    return offsets
