"""Reading a raw-data file from Python: events per second and bytes per second of
`rodeo.open` (words only, and with every ROB view made), against reading the same file's bytes
into one NumPy array (`numpy.fromfile`, the machine's file-read speed) in the same run.

Usage: python python/benchmarks/read.py FILE [--repeat N]   (prints one JSON object with `rows`)
Make FILE with e.g. `rodeo gen events --count 20000 --output DIR`.
"""

import argparse
import json
import os
import statistics
import time

import numpy as np

import rodeo


def timed(fn, repeat):
    times = []
    result = None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def read_bytes(path):
    return np.fromfile(path, dtype=np.uint8).size, 0


def read_events(path):
    n = 0
    nbytes = 0
    for ev in rodeo.open(path):
        n += 1
        nbytes += ev.words.nbytes
    return nbytes, n


def read_events_robs(path):
    n = 0
    nbytes = 0
    for ev in rodeo.open(path):
        n += 1
        nbytes += ev.words.nbytes
        for rob in ev.robs:
            rob.data  # noqa: B018 (the view is what is measured)
    return nbytes, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    file_bytes = os.path.getsize(args.file)
    rows = []
    base = None
    for name, fn in [("numpy_fromfile_baseline", read_bytes), ("rodeo_open_words", read_events),
                     ("rodeo_open_words_and_robs", read_events_robs)]:
        secs, (nbytes, events) = timed(lambda fn=fn: fn(args.file), args.repeat)
        base = base or secs  # the first row is the baseline
        rows.append({
            "reader": name,
            "events": events,
            "file_bytes": file_bytes,
            "seconds_median": round(secs, 4),
            "events_per_s": round(events / secs) if events else None,
            "bytes_per_s": round(file_bytes / secs),
            "ratio_to_baseline": round(base / secs, 3),
        })
    print(json.dumps({"benchmark": "python_read", "repeat": args.repeat, "rows": rows}))


if __name__ == "__main__":
    main()
