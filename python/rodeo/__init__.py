"""rodeo from Python: raw-data files as NumPy arrays, event and ROB fragments, writers.

Everything here is the Rust code of rodeo-format (``rodeo._rodeo``, built with PyO3): the
reader of raw-data files (rodeo's container and ATLAS/BESIII EventStorage v2-v6), the writer, the validating fragment views, the fragment builders and
the synthetic-event generator; and ``rodeo.Client``, the run-control HTTP client
(``rodeo.client``, pure Python). See docs/python.md for the API.

    import rodeo
    with rodeo.open("00000001.physics_Main.rodeo-gen.0001.data") as f:
        for event in f:
            print(event.global_id, event.l1id, [hex(r.source_id) for r in event.robs])
"""

from ._rodeo import (
    FORMAT_VERSION,
    Error,
    Event,
    FormatError,
    RawFile,
    RawFileError,
    Rob,
    Writer,
    build_event,
    build_rob,
    check_counter,
    counter_word,
    open,
    synth_event,
    verify,
)
from .client import Client, ControlError, IllegalTransition, Unauthorized
from .monitor import Monitor
from . import model  # the ROS utilisation model (NumPy; matplotlib only for its plot)

__all__ = [
    "Client",
    "Monitor",
    "ControlError",
    "IllegalTransition",
    "Unauthorized",
    "FORMAT_VERSION",
    "Error",
    "Event",
    "FormatError",
    "RawFile",
    "RawFileError",
    "Rob",
    "Writer",
    "build_event",
    "build_rob",
    "check_counter",
    "counter_word",
    "open",
    "synth_event",
    "verify",
    "model",
]

__version__ = "0.1.0"
