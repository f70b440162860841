#!/usr/bin/env python3
"""A tiny "detector": sends S-LINK ROD fragments over TCP to a rodeo readout node.

One connection per ROB (the partition's [ros] listen addresses, in order). Each fragment is
one record: a little-endian u32 length in bytes, then the fragment, padded to 4 bytes
(specs/links.md; the records `rodeo gen link --send tcp://...` writes). Standard library only.

    python3 detector.py --events 1000 tcp://127.0.0.1:47710 tcp://127.0.0.1:47711
"""
import argparse
import random
import socket
import struct
import time

ROD_MARKER = 0xEE1234EE
ROD_VERSION = 0x03010000


def rod_fragment(source_id, run, l1id, bcid, data):
    """A ROD fragment (specs/event-format.md): 9 header words, one status word, the data,
    then the trailer (status count, data count, status position 0 = status first)."""
    header = [ROD_MARKER, 9, ROD_VERSION, source_id, run, l1id, bcid & 0xFFF, 1, 0]
    status = [0]
    trailer = [len(status), len(data), 0]
    return struct.pack(f"<{9 + 1 + len(data) + 3}I", *header, *status, *data, *trailer)


def connect(address, deadline):
    """Connects to tcp://HOST:PORT, retrying until the partition listens."""
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    while True:
        try:
            sock = socket.create_connection((host, int(port)), timeout=5)
            # Each record leaves at once: events are built as they are sent.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as e:
            if time.monotonic() > deadline:
                raise SystemExit(f"cannot connect to {address}: {e} (is the partition running?)")
            time.sleep(0.1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("addresses", nargs="+", help="tcp://HOST:PORT, one per ROB")
    p.add_argument("--events", type=int, default=1000)
    p.add_argument("--rate", type=float, default=0.0, help="events per second (0: as fast as taken)")
    p.add_argument("--run", type=int, default=1)
    p.add_argument("--retry-seconds", type=float, default=10.0,
                   help="keep trying to connect this long while the partition starts")
    args = p.parse_args()
    deadline = time.monotonic() + args.retry_seconds
    links = [connect(a, deadline) for a in args.addresses]
    start = time.monotonic()
    for l1id in range(args.events):  # L1IDs count from 0, as the data-driven L1 expects
        bcid = random.randrange(3564)
        for rob, link in enumerate(links):
            # The "detector": a few channels with an ADC-like value each.
            data = [(ch << 16) | random.randrange(4096) for ch in range(random.randint(4, 32))]
            frag = rod_fragment(0x00510000 | rob, args.run, l1id, bcid, data)
            link.sendall(struct.pack("<I", len(frag)) + frag)
        if args.rate > 0:
            time.sleep(max(0.0, start + (l1id + 1) / args.rate - time.monotonic()))
    for link in links:
        link.close()  # the clean end of the stream: that ROB's input ends
    print(f"sent {args.events} events to {len(links)} ROBs")


if __name__ == "__main__":
    main()
