"""Requests fragments from a `rodeo ros` process with pyzmq and validates them.

Written from specs/dataflow-protocol.md, specs/event-format.md and specs/links.md alone (no
rodeo code): a DEALER socket, one protocol message per ZeroMQ message, no empty delimiter
frame; every message is a 12-byte little-endian header (type id, transaction id, payload size)
and its payload.

Run: python3 python/tests/test_ros_pyzmq.py   (RODEO_BIN selects the binary; default: the
release build, else the debug build, under target/).
"""

import json
import os
import signal
import struct
import subprocess
import sys
import unittest

import zmq

CLEAR = 0x00DCDF10
DATA_REQUEST = 0x00DCDF20
DATA_REPLY = 0x00DCDF21
ROB_MARKER = 0xDD1234DD
ROD_MARKER = 0xEE1234EE
FRAGMENT_LOST = 0x2000 << 16
FRAGMENT_PENDING = 0x4000 << 16
BASE = 0x00510000
CHANNELS = 4
DATA_WORDS = 50
TIMEOUT_MS = 10000


def rodeo_bin():
    if os.environ.get("RODEO_BIN"):
        return os.environ["RODEO_BIN"]
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    for kind in ("release", "debug"):
        p = os.path.join(root, "target", kind, "rodeo")
        if os.path.exists(p):
            return p
    raise unittest.SkipTest("no rodeo binary: build it first (cargo build -p rodeo)")


def message(kind, txn, payload):
    return struct.pack("<III", kind, txn, len(payload)) + payload


def data_request(txn, l1id, robs):
    return message(DATA_REQUEST, txn, struct.pack("<II", l1id, len(robs)) +
                   b"".join(struct.pack("<I", r) for r in robs))


def clear(seq, l1ids):
    return message(CLEAR, seq, struct.pack("<I", len(l1ids)) +
                   b"".join(struct.pack("<I", x) for x in l1ids))


def words(b):
    return list(struct.unpack("<%dI" % (len(b) // 4), b))


class Rob:
    """One ROB fragment, checked per the event format."""

    def __init__(self, w):
        assert w[0] == ROB_MARKER, hex(w[0])
        self.size, header_size = w[1], w[2]
        assert self.size == len(w), (self.size, len(w))
        self.source = w[4]
        nstatus = w[5]
        self.status = w[6] if nstatus else 0
        assert header_size == 6 + nstatus + 1
        rod = w[header_size:]
        assert rod[0] == ROD_MARKER, hex(rod[0])
        assert rod[1] == 9
        self.l1id = rod[5]
        rstatus, ndata, _pos = rod[-3], rod[-2], rod[-1]
        assert 9 + rstatus + ndata + 3 == len(rod), "ROD trailer disagrees with its size"
        self.data = rod[9 + rstatus: 9 + rstatus + ndata]


class RosProcess(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc = subprocess.Popen(
            [rodeo_bin(), "ros", "--listen", "tcp://127.0.0.1:0", "--channels", str(CHANNELS),
             "--fragment-words", str(DATA_WORDS), "--pages-per-channel", "256", "--json"],
            stdout=subprocess.PIPE, text=True)
        line = cls.proc.stdout.readline().strip()
        assert line.startswith("listening on "), line
        cls.endpoint = line[len("listening on "):]
        cls.ctx = zmq.Context()
        cls.sock = cls.ctx.socket(zmq.DEALER)
        cls.sock.setsockopt(zmq.LINGER, 0)
        cls.sock.setsockopt(zmq.RCVTIMEO, TIMEOUT_MS)
        cls.sock.connect(cls.endpoint)
        cls.txn = 0

    @classmethod
    def tearDownClass(cls):
        cls.sock.close()
        cls.ctx.term()
        cls.proc.send_signal(signal.SIGTERM)
        out, _ = cls.proc.communicate(timeout=30)
        assert cls.proc.returncode == 0, cls.proc.returncode
        summary = json.loads(out.strip().splitlines()[-1])
        # Every request this test sent was answered exactly once.
        assert summary["requests"] == summary["replies"] == cls.txn, summary

    def ask(self, l1id, robs):
        type(self).txn += 1
        txn = self.txn
        self.sock.send(data_request(txn, l1id, robs))
        frames = self.sock.recv_multipart()
        msg = b"".join(frames)
        kind, rtxn, size = struct.unpack_from("<III", msg)
        self.assertEqual(kind, DATA_REPLY)
        self.assertEqual(rtxn, txn)
        self.assertEqual(size, len(msg) - 12)
        rl1id, n = struct.unpack_from("<II", msg, 12)
        self.assertEqual(rl1id, l1id)
        robs_out, rest = [], msg[20:]
        for _ in range(n):
            size_words = struct.unpack_from("<I", rest, 4)[0]
            robs_out.append(Rob(words(rest[:4 * size_words])))
            rest = rest[4 * size_words:]
        self.assertEqual(rest, b"", "bytes after the last fragment")
        return robs_out

    def test_1_fragments_are_valid(self):
        for l1id in range(0, 30):
            want = [BASE + (l1id % CHANNELS), BASE + ((l1id + 1) % CHANNELS)]
            robs = self.ask(l1id, want)
            self.assertEqual(sorted(r.source for r in robs), sorted(want))
            for r in robs:
                self.assertEqual(r.status, 0)
                self.assertEqual(r.l1id, l1id)
                self.assertEqual(len(r.data), DATA_WORDS)
                # links.md: the emulated payload is a counter incrementing per word.
                for a, b in zip(r.data, r.data[1:]):
                    self.assertEqual(b, (a + 1) & 0xFFFFFFFF)

    def test_2_whole_node_request(self):
        robs = self.ask(31, [])
        self.assertEqual(sorted(r.source for r in robs), [BASE + c for c in range(CHANNELS)])

    def test_3_cleared_is_lost_and_unknown_rob_is_lost(self):
        self.sock.send(clear(0, list(range(0, 10))))
        robs = self.ask(5, [BASE])
        self.assertTrue(robs[0].status & FRAGMENT_LOST, hex(robs[0].status))
        robs = self.ask(40, [0x7FFF0000])
        self.assertTrue(robs[0].status & FRAGMENT_LOST)
        self.assertEqual(robs[0].data, [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
