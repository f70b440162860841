#!/usr/bin/env python3
"""A reference trigger unit for `[l1] mode = "external"`: sends L1 accepts to a partition and
holds them while the partition is busy. Standard library only.

Protocol (little-endian, one TCP connection; docs/test-beam.md):
  to the partition:   8 bytes per L1 accept: u32 extended L1ID, u32 L1 trigger type
  from the partition: one byte per change of state: b"B" busy, b"R" ready (and one on connect)
Closing the connection ends the run's L1 input (shut down the sending side, then read until
the partition closes: a close with unread bytes resets the connection and loses records).

    python3 tlu.py --triggers 1000 --rate 500 tcp://127.0.0.1:47900
"""
import argparse
import socket
import struct
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("address", help="tcp://HOST:PORT (the partition's l1.external_listen)")
    p.add_argument("--triggers", type=int, default=1000)
    p.add_argument("--rate", type=float, default=0.0, help="triggers per second (0: as fast as ready)")
    p.add_argument("--trigger-type", type=int, default=1)
    args = p.parse_args()
    host, port = args.address.removeprefix("tcp://").rsplit(":", 1)
    deadline = time.monotonic() + 30
    while True:
        try:
            sock = socket.create_connection((host, int(port)), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    sock.setblocking(False)
    busy = True  # until the partition says ready
    held = 0
    start = time.monotonic()
    l1id = 0
    while l1id < args.triggers:
        try:
            for state in sock.recv(64):  # every state byte the partition sent since
                busy = state == ord("B")
        except BlockingIOError:
            pass
        if busy:
            held += 1
            time.sleep(0.0005)
            continue
        if args.rate > 0 and time.monotonic() < start + l1id / args.rate:
            time.sleep(0.0002)
            continue
        record = struct.pack("<II", l1id, args.trigger_type)
        sock.setblocking(True)
        sock.sendall(record)  # blocks if the partition stops reading (its queue is full)
        sock.setblocking(False)
        l1id += 1
    # End as the protocol asks: our side first, then read until the partition closes. Closing
    # with an unread state byte would reset the connection, and the kernel would drop the
    # records still in our send queue.
    sock.setblocking(True)
    sock.settimeout(10)
    sock.shutdown(socket.SHUT_WR)
    try:
        while sock.recv(64):
            pass
    except OSError:
        pass
    sock.close()
    print(f"sent {l1id} triggers; busy seen on {held} polls")


if __name__ == "__main__":
    main()
