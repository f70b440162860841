"""Sampled events of a running partition: ``rodeo.Monitor(endpoint)``.

A partition with ``[monitoring] endpoint = "tcp://HOST:PORT"`` publishes a sample of its full
events there (docs/run-control.md, "Monitoring protocol"). ``Monitor`` subscribes with a plain
pyzmq SUB socket and yields each sample as a :class:`rodeo.Event`, the same class the file
reader gives::

    import rodeo
    with rodeo.Monitor("tcp://127.0.0.1:5600") as mon:
        for event in mon.events(timeout=5.0):
            print(event.global_id, len(event.robs), mon.dropped)

Each message is two frames: a JSON header (``dcm``, ``seq``, ``run``, ``global_id``,
``bytes``) and the full event's bytes exactly as in the files. ``dropped`` counts the samples
this subscriber missed (gaps in a DCM's ``seq``: the publisher never waits for a slow
subscriber, it drops for it). pyzmq is needed (``pip install pyzmq``).
"""

import json
import time

from ._rodeo import Event


class Monitor:
    """A subscriber to a partition's sampled events (module docs)."""

    def __init__(self, endpoint, queue=1000):
        try:
            import zmq
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("rodeo.Monitor needs pyzmq: pip install pyzmq") from e
        self._zmq = zmq
        self.endpoint = endpoint.replace("tcp://*:", "tcp://127.0.0.1:", 1)
        self._ctx = zmq.Context.instance()
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.LINGER, 0)
        self._sub.setsockopt(zmq.RCVHWM, queue)
        self._sub.setsockopt(zmq.SUBSCRIBE, b"")
        self._sub.connect(self.endpoint)
        #: Samples received.
        self.received = 0
        #: Samples missed (gaps in the DCMs' sequence numbers).
        self.dropped = 0
        #: The header of the last sample (``dcm``, ``seq``, ``run``, ``global_id``, ``bytes``).
        self.header = None
        self._last_seq = {}

    def receive(self, timeout=None):
        """The next sample as an :class:`Event`, or ``None`` if none came within ``timeout``
        seconds (``None``: wait as long as it takes)."""
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        if not self._sub.poll(ms):
            return None
        frames = self._sub.recv_multipart()
        header = json.loads(frames[0]) if len(frames) > 1 else {}
        data = frames[-1]
        dcm, seq = header.get("dcm"), header.get("seq")
        if dcm is not None and seq is not None:
            last = self._last_seq.get(dcm)
            if last is not None and seq > last:
                self.dropped += seq - last - 1
            self._last_seq[dcm] = seq
        self.header = header
        self.received += 1
        return Event(data)

    def events(self, timeout=None, count=None):
        """Yields samples until ``count`` were given, or none came for ``timeout`` seconds
        (``None``: forever)."""
        given = 0
        while count is None or given < count:
            ev = self.receive(timeout)
            if ev is None:
                return
            given += 1
            yield ev

    def __iter__(self):
        return self.events()

    def close(self):
        """Closes the socket."""
        self._sub.close(0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
