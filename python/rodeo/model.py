"""The ROS utilisation model (ROS paper, section 7.1.3), fitted from a `rodeo study ros` CSV.

    U = f_ext * t_ext + f_int * t_int + f_del * t_del + S * t_kB

f_ext is the external request rate (DataRequests/s), f_int the internal fragment-retrieval
rate (fragments/s), f_del the delete rate (events cleared/s) and S the kB/s sent (1 kB = 1000
bytes). At a grid point's maximum delete rate the node is saturated (U = 1), so each point is
one linear equation in the four effective times; the fit is least squares with the times kept
non-negative, the same method as the Rust fit in `rodeo study ros` (crates/rodeo-studies/src/
study/model.rs), so both give the same parameters from the same CSV (whose rows are the medians
of each point's runs).

Three bases, as in the study's ``model.json``:

- ``"cpu"`` (the default, the study's ``parameters``): delete rates per CPU-second of the whole
  process, node and tester (``delete_rate_per_cpu_s``), so U = 1 is one CPU busy: the basis
  that held best on a shared host (docs/studies.md).
- ``"node"``: delete rates per CPU-second of the readout node's core thread
  (``delete_rate_per_node_cpu_s``; ``node_cpu_time`` in ``model.json``).
- ``"wall"``: the paper's wall-clock maximum delete rate (``delete_rate_hz``; ``wall_clock``).

Pure NumPy; :func:`plot_figure9` needs matplotlib (imported when called).

    import rodeo.model as m
    table = m.read_csv("rodeo-study/ros/ros.csv")
    model = m.fit(table, basis="wall", rows="train")
    print(model.parameters, m.holdout_error(model, table))
    print(model.max_delete_rate(requests_per_event=0.9, fragments_per_event=7.0, kb_per_event=11.8))
    m.plot_figure9(table, model, "fig9.png")
"""

from __future__ import annotations

import csv
import itertools
from dataclasses import dataclass
from typing import Dict, Mapping, Optional

import numpy as np

__all__ = [
    "PARAMETERS",
    "RATE_COLUMNS",
    "Model",
    "read_csv",
    "fit",
    "holdout_error",
    "per_event_for_mix",
    "plot_figure9",
]

#: Parameter names, in the order of :attr:`Model.times`.
PARAMETERS = ("t_ext_s", "t_int_s", "t_del_s", "t_kb_s")

#: The CSV column holding the delete rate of each basis.
RATE_COLUMNS = {
    "node": "delete_rate_per_node_cpu_s",
    "cpu": "delete_rate_per_cpu_s",
    "wall": "delete_rate_hz",
}

#: Columns read when present (CSVs written before the node basis lack them).
_OPTIONAL = ("delete_rate_per_node_cpu_s",)

_NUMERIC = (
    "fragment_words",
    "eb_fraction",
    "l2_fraction",
    "roi_size",
    "delete_rate_hz",
    "delete_rate_per_cpu_s",
    "readout_fraction",
    "requests_per_event",
    "fragments_per_event",
    "kb_per_event",
)


def read_csv(path) -> Dict[str, np.ndarray]:
    """Reads a `rodeo study ros` CSV into a dict of column arrays (floats, ``set`` as strings).

    Raises ValueError naming the missing columns if the file is not such a CSV.
    """
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path}: no rows")
    missing = [c for c in _NUMERIC + ("set",) if c not in rows[0]]
    if missing:
        raise ValueError(f"{path}: not a `rodeo study ros` CSV, missing columns {missing}")
    columns = _NUMERIC + tuple(c for c in _OPTIONAL if c in rows[0])
    table = {c: np.array([float(r[c]) for r in rows]) for c in columns}
    table["set"] = np.array([r["set"] for r in rows])
    return table


def _per_event(table: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per-event costs, one row per point: requests, fragments, 1 (the delete), kB."""
    n = len(table["requests_per_event"])
    return np.column_stack(
        [
            table["requests_per_event"],
            table["fragments_per_event"],
            np.ones(n),
            table["kb_per_event"],
        ]
    )


def _select(table: Mapping[str, np.ndarray], rows: str) -> np.ndarray:
    if rows == "all":
        return np.ones(len(table["set"]), dtype=bool)
    if rows not in ("train", "holdout"):
        raise ValueError(f"rows must be 'train', 'holdout' or 'all', not {rows!r}")
    return table["set"] == rows


def _nnls_unit_target(a: np.ndarray) -> np.ndarray:
    """min ||a x - 1||^2 subject to x >= 0, by solving every support subset (4 columns)."""
    scale = np.linalg.norm(a, axis=0)
    usable = scale > 0
    b = np.ones(a.shape[0])
    best, best_res = None, np.inf
    for k in range(1, a.shape[1] + 1):
        for cols in itertools.combinations(range(a.shape[1]), k):
            if not all(usable[list(cols)]):
                continue
            sub = a[:, cols] / scale[list(cols)]
            x, *_ = np.linalg.lstsq(sub, b, rcond=None)
            if np.any(x < 0) or not np.all(np.isfinite(x)):
                continue
            t = np.zeros(a.shape[1])
            t[list(cols)] = x / scale[list(cols)]
            res = float(np.sum((a @ t - 1.0) ** 2))
            if res < best_res:
                best, best_res = t, res
    if best is None:
        raise ValueError("no non-negative solution: the points are degenerate")
    return best


@dataclass
class Model:
    """Effective times (seconds) of the utilisation model, and the basis they were fitted on."""

    times: np.ndarray
    basis: str = "cpu"

    @property
    def parameters(self) -> Dict[str, float]:
        """The four times by name (``t_ext_s``, ``t_int_s``, ``t_del_s``, ``t_kb_s``)."""
        return {k: float(v) for k, v in zip(PARAMETERS, self.times)}

    def utilisation(self, f_ext, f_int, f_del, s_kb):
        """U for the given rates (scalars or arrays): requests/s, fragments/s, deletes/s, kB/s."""
        t = self.times
        return f_ext * t[0] + f_int * t[1] + f_del * t[2] + s_kb * t[3]

    def max_delete_rate(self, requests_per_event, fragments_per_event, kb_per_event):
        """The delete rate at which U reaches 1, for a mix with these per-event costs (Hz; per
        CPU-second on the ``node`` and ``cpu`` bases). Scalars or arrays."""
        t = self.times
        cost = (
            np.asarray(requests_per_event, dtype=float) * t[0]
            + np.asarray(fragments_per_event, dtype=float) * t[1]
            + t[2]
            + np.asarray(kb_per_event, dtype=float) * t[3]
        )
        with np.errstate(divide="ignore"):
            return 1.0 / cost

    def predict(self, table: Mapping[str, np.ndarray]) -> np.ndarray:
        """Predicted maximum delete rate of every point of a study table."""
        pe = _per_event(table)
        return self.max_delete_rate(pe[:, 0], pe[:, 1], pe[:, 3])


def fit(table, basis: str = "cpu", rows: str = "train", trim: bool = True) -> Model:
    """Fits the model to a study table (from :func:`read_csv`, or a CSV path).

    ``basis`` is ``"node"``, ``"cpu"`` or ``"wall"``; ``rows`` is ``"train"`` (what the Rust
    study fits), ``"holdout"`` or ``"all"``. With ``trim`` (the default, as the study) the fit
    is repeated without the points whose relative error exceeds max(3 x the median, 5%).
    """
    if not isinstance(table, Mapping):
        table = read_csv(table)
    if basis not in RATE_COLUMNS:
        raise ValueError(f"basis must be one of {sorted(RATE_COLUMNS)}, not {basis!r}")
    if RATE_COLUMNS[basis] not in table:
        raise ValueError(f"the table has no {RATE_COLUMNS[basis]} column (basis {basis!r})")
    sel = _select(table, rows)
    if not np.any(sel):
        raise ValueError(f"no {rows} rows in the table")
    rate = table[RATE_COLUMNS[basis]][sel]
    # Each saturated point: per-event costs times the delete rate = the four rates; U = 1.
    a = _per_event(table)[sel] * rate[:, None]
    times = _nnls_unit_target(a)
    if trim:
        # Once more without the outliers (relative error above 3 x the median and 5%), as the
        # Rust study does: a point measured while other work took the CPU would pull every time.
        err = np.abs(1.0 / (a / rate[:, None] @ times) - rate) / rate
        cut = max(3.0 * np.sort(err)[len(err) // 2], 0.05)
        keep = err <= cut
        if 4 <= np.count_nonzero(keep) < len(keep):
            times = _nnls_unit_target(a[keep])
    return Model(times=times, basis=basis)


def holdout_error(model: Model, table, rows: str = "holdout") -> float:
    """Largest relative error of the model's maximum delete rate over the chosen rows."""
    if not isinstance(table, Mapping):
        table = read_csv(table)
    sel = _select(table, rows)
    measured = table[RATE_COLUMNS[model.basis]][sel]
    predicted = model.predict(table)[sel]
    return float(np.max(np.abs(predicted - measured) / measured))


def per_event_for_mix(l2_fraction, eb_fraction, roi_size, kb_per_fragment, links=24):
    """Per-event costs of a request mix, from the tester's rules: an L2 request for ``roi_size``
    ROBs with probability ``l2_fraction``, an EB request for the rest with probability
    ``eb_fraction``. Returns (requests, fragments, kB) per event; the readout fraction is
    fragments / links."""
    requests = l2_fraction + eb_fraction
    fragments = l2_fraction * (1.0 - eb_fraction) * roi_size + eb_fraction * links
    return requests, fragments, fragments * kb_per_fragment


def plot_figure9(table, model: Optional[Model] = None, path=None, ax=None, roi_size=4, l2_fraction=0.7):
    """The paper's Figure 9: inverse delete rate (us) against the readout fraction, one series
    per fragment size (RoI size 4, L2 fraction 0.7 by default), with the model's lines.

    Draws on ``ax`` (a new figure if None); saves to ``path`` if given. Returns the axes.
    """
    import matplotlib

    if ax is None and path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not isinstance(table, Mapping):
        table = read_csv(table)
    basis = model.basis if model is not None else "wall"
    rate = table[RATE_COLUMNS[basis]]
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(8, 5.5))
    sel_mix = (table["roi_size"] == roi_size) & np.isclose(table["l2_fraction"], l2_fraction)
    predicted = model.predict(table) if model is not None else None
    for words in np.unique(table["fragment_words"][sel_mix]):
        sel = sel_mix & (table["fragment_words"] == words)
        order = np.argsort(table["readout_fraction"][sel])
        x = table["readout_fraction"][sel][order]
        (pts,) = ax.plot(x, 1e6 / rate[sel][order], "o", label=f"{int(words)} words")
        if predicted is not None:
            ax.plot(x, 1e6 / predicted[sel][order], "-", color=pts.get_color())
    ax.set_xlabel("readout fraction")
    ax.set_ylabel("1 / delete rate (us)" if basis == "wall" else "CPU us per delete")
    ax.set_title(f"Inverse delete rate vs readout fraction (RoI {roi_size}, L2 {l2_fraction})")
    ax.grid(True, alpha=0.3)
    ax.legend()
    if path is not None:
        ax.figure.savefig(path, dpi=100)
        if own:
            plt.close(ax.figure)
    return ax
