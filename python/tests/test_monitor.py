"""rodeo.Monitor and a plain pyzmq SUB socket receive a running partition's sampled events."""

import json
import socket
import struct
import subprocess

import pytest

zmq = pytest.importorskip("zmq")

import rodeo  # noqa: E402

FULL_EVENT_MARKER = 0xAA1234AA


def free_port_pair():
    """A port p with p and p + 1 free (the forwarder's input takes p + 1)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p >= 65535:
            continue
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", p))
                b.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    raise RuntimeError("no two consecutive free ports")


def start_run(rodeo_bin, tmp_path, port, seconds=20):
    cfg = tmp_path / "p.toml"
    cfg.write_text(
        f"""
[run]
seconds = {seconds}
events = 0
output = "{tmp_path / 'out'}"
[l1]
rate_hz = 2000.0
[monitoring]
endpoint = "tcp://127.0.0.1:{port}"
fraction = 0.5
"""
    )
    return subprocess.Popen(
        [str(rodeo_bin), "run", "--config", str(cfg), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc):
    """Stops the run (SIGINT: in order) and returns its balance sheet."""
    import signal

    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_a_plain_sub_socket_receives_full_events(rodeo_bin, tmp_path):
    port = free_port_pair()
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(f"tcp://127.0.0.1:{port}")
    proc = start_run(rodeo_bin, tmp_path, port)
    try:
        got = 0
        while got < 20:
            assert sub.poll(60000), "no sample within 60 s"
            frames = sub.recv_multipart()
            data = frames[-1]
            marker, size = struct.unpack_from("<II", data)
            assert marker == FULL_EVENT_MARKER
            assert size * 4 == len(data)
            header = json.loads(frames[0])
            assert header["bytes"] == len(data)
            assert header["dcm"].startswith("dcm-")
            got += 1
    finally:
        sub.close(0)
        sheet = finish(proc)
    assert sheet["balanced"], sheet


def test_monitor_yields_the_readers_event_objects(rodeo_bin, tmp_path):
    port = free_port_pair()
    with rodeo.Monitor(f"tcp://127.0.0.1:{port}") as mon:
        proc = start_run(rodeo_bin, tmp_path, port)
        try:
            events = list(mon.events(timeout=60.0, count=10))
        finally:
            sheet = finish(proc)
        assert len(events) == 10
        for ev in events:
            assert isinstance(ev, rodeo.Event)
            assert int(ev.words[0]) == FULL_EVENT_MARKER
            assert len(ev.robs) > 0
            assert ev.run_number == sheet["run_number"]
        assert mon.received == 10
        assert mon.header["global_id"] == events[-1].global_id
    assert sheet["balanced"], sheet
