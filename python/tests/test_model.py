"""rodeo.model: the ROS utilisation model fitted from a `rodeo study ros` CSV.

``data/ros_quick.csv`` and ``data/ros_quick_model.json`` were written together by one
`rodeo study ros --quick` run (docs/studies.md): the NumPy fit must find the Rust fit's
parameters from the same rows. One test runs the binary on a tiny grid to read a fresh CSV.
"""

import json
import pathlib

import numpy as np
import pytest

import rodeo.model as m

DATA = pathlib.Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="module")
def table():
    return m.read_csv(DATA / "ros_quick.csv")


@pytest.fixture(scope="module")
def rust_model():
    return json.loads((DATA / "ros_quick_model.json").read_text())


@pytest.mark.parametrize(
    "basis,key", [("cpu", None), ("node", "node_cpu_time"), ("wall", "wall_clock")]
)
def test_numpy_fit_matches_the_rust_fit(table, rust_model, basis, key):
    model = m.fit(table, basis=basis, rows="train")
    want = rust_model["parameters"] if key is None else rust_model[key]["parameters"]
    for name in m.PARAMETERS:
        assert model.parameters[name] >= 0.0
        assert model.parameters[name] == pytest.approx(want[name], rel=1e-6, abs=1e-15)
    err = rust_model["holdout_max_relative_error"] if key is None else rust_model[key]["holdout_max_relative_error"]
    assert m.holdout_error(model, table) == pytest.approx(err, rel=1e-6)


def test_utilisation_is_one_at_the_predicted_rate(table):
    model = m.fit(table, basis="cpu")
    req, frags, kb = m.per_event_for_mix(0.7, 0.2, 4, kb_per_fragment=1.65)
    rate = model.max_delete_rate(req, frags, kb)
    assert rate > 0
    u = model.utilisation(req * rate, frags * rate, rate, kb * rate)
    assert u == pytest.approx(1.0)
    # More requests per event cost more: the rate cannot rise.
    assert model.max_delete_rate(req * 2, frags, kb) <= rate


def test_fit_recovers_known_times():
    t = np.array([3e-6, 0.4e-6, 2e-6, 0.1e-6])
    n = 12
    rng = np.random.default_rng(5)
    table = {
        "requests_per_event": rng.uniform(0.5, 2.0, n),
        "fragments_per_event": rng.uniform(2, 14, n),
        "kb_per_event": rng.uniform(3, 25, n),
        "set": np.array(["train"] * n),
    }
    cost = (table["requests_per_event"] * t[0] + table["fragments_per_event"] * t[1] + t[2]
            + table["kb_per_event"] * t[3])
    table["delete_rate_per_cpu_s"] = 1.0 / cost
    model = m.fit(table, basis="cpu", rows="all")
    np.testing.assert_allclose(model.times, t, rtol=1e-6)


def test_bad_input_is_a_clear_error(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="missing columns"):
        m.read_csv(p)
    with pytest.raises(ValueError, match="basis"):
        m.fit(DATA / "ros_quick.csv", basis="nope")


def test_figure9_png(table, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "fig9.png"
    ax = m.plot_figure9(table, m.fit(table, basis="wall"), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(ax.get_lines()) == 8  # 4 sizes: points and model line each


def test_fresh_csv_from_the_binary(run_rodeo, tmp_path):
    # A tiny grid may miss the model's goal: the study then exits with 1, its files written.
    out = run_rodeo("study", "ros", "--quick", "--seconds", "0.1", "--rounds", "1",
                    "--max-points", "8", "--output", tmp_path, check=False)
    assert out.returncode in (0, 1), out.stderr
    table = m.read_csv(tmp_path / "ros" / "ros.csv")
    rust = json.loads((tmp_path / "ros" / "model.json").read_text())
    model = m.fit(table)
    for name in m.PARAMETERS:
        assert model.parameters[name] == pytest.approx(rust["parameters"][name], rel=1e-6, abs=1e-15)
