"""rodeo.Client against a real `rodeo run --http` process: status, metrics (cross-checked with
prometheus_client's parser), the token check, an illegal transition, a clean stop."""

import json
import os
import re
import subprocess
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

import rodeo
from conftest import wait_for

TOKEN = "py-token-42"


@pytest.fixture()
def running(rodeo_bin, tmp_path):
    """`rodeo run --http 127.0.0.1:0` for up to 300 s; yields (url, process)."""
    env = dict(os.environ, RODEO_TOKEN=TOKEN)
    p = subprocess.Popen(
        [str(rodeo_bin), "run", "--seconds", "300", "--rate", "5000", "--json",
         "--http", "127.0.0.1:0", "--output", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    url = None
    deadline = time.monotonic() + 60
    while url is None and time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        m = re.search(r"HTTP API on (http://\S+?)/?$", line.strip())
        if m:
            url = m.group(1)
    assert url, "no HTTP address from rodeo run"
    try:
        yield url, p
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)


def wait_running(client):
    def running():
        s = client.status()
        return s if s["state"] == "RUNNING" and s["events_written"] > 0 else None

    return wait_for("the run writing events", 60, running)


def test_status_metrics_token_and_stop(running):
    url, proc = running
    c = rodeo.Client(url, token=TOKEN)
    s = wait_running(c)
    assert s["run_number"] == 1
    assert {a["role"] for a in s["apps"]} == {"logger", "ros", "dcm", "supervisor"}
    assert "[dcm]" in c.config()

    m = c.metrics()
    assert len(m) >= 20
    assert m['rodeo_partition_state{state="RUNNING"}'] == 1.0
    assert m['rodeo_l1_accepts_total{app="supervisor"}'] > 0
    # The same page through Prometheus's own parser: every family typed, counters and
    # histograms among them, the histogram consistent (+Inf bucket == count).
    # dcm-1 may not have asked for data yet just after the start: wait (bounded) until it has.
    def asked():
        families = {f.name: f for f in text_string_to_metric_families(c.metrics_text())}
        h = families["rodeo_dcm_request_latency_seconds"]
        by = {(x.name, x.labels.get("app"), x.labels.get("le")): x.value for x in h.samples}
        if by.get(("rodeo_dcm_request_latency_seconds_count", "dcm-1", None), 0) > 0:
            return families, h, by
        return None

    families, h, by = wait_for("dcm-1 to ask for data", 30, asked)
    # The in-process queues, by name and policy: the readout's DMA ready queues among them.
    caps = families["rodeo_queue_capacity"]
    ready = [x for x in caps.samples if x.labels.get("queue") == "cards.dma.ready"]
    assert ready and ready[0].labels["policy"] == "block" and ready[0].value > 0, caps.samples
    assert families["rodeo_queue_full_events"].type == "counter"
    assert families["rodeo_l1_accepts"].type == "counter"
    assert h.type == "histogram"
    assert by[("rodeo_dcm_request_latency_seconds_bucket", "dcm-1", "+Inf")] == \
        by[("rodeo_dcm_request_latency_seconds_count", "dcm-1", None)] > 0
    assert sum(len(f.samples) for f in families.values()) >= 20

    with pytest.raises(rodeo.Unauthorized):
        rodeo.Client(url, token="wrong").command("stop")
    with pytest.raises(rodeo.Unauthorized):
        rodeo.Client(url, token="").command("stop")
    with pytest.raises(rodeo.IllegalTransition, match="RUNNING"):
        c.command("configure")
    with pytest.raises(rodeo.ControlError):
        c.command("halt")
    assert c.command("stop") == "CONNECTED"

    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    summary = json.loads(out)
    assert summary["balanced"] is True
    assert summary["events_written"] > 0


def test_parse_metrics_reads_labels_and_special_values():
    m = rodeo.client.parse_metrics(
        '# HELP x y\n# TYPE x counter\nx_total{a="b\\"c"} 3\nh_bucket{le="+Inf"} +Inf\ny 1e3\n'
    )
    assert m == {'x_total{a="b\\"c"}': 3.0, 'h_bucket{le="+Inf"}': float("inf"), "y": 1000.0}


def _serve_once(handler_body):
    """An HTTP server on 127.0.0.1 answering one request with ``handler_body(handler)``;
    returns (url, thread, seen) where ``seen`` collects the requests' Authorization headers."""
    import http.server
    import threading

    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            handler_body(self)

        do_POST = do_GET

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    server.timeout = 10
    t = threading.Thread(target=server.handle_request, daemon=True)
    t.start()
    return f"http://127.0.0.1:{server.server_address[1]}", t, seen


def test_a_redirect_is_not_followed_with_the_token():
    """A server that redirects elsewhere gets no second request: the token stays here."""
    elsewhere, t2, seen_elsewhere = _serve_once(lambda h: (h.send_response(200), h.end_headers()))

    def redirect(h):
        h.send_response(302)
        h.send_header("Location", elsewhere + "/api/command")
        h.send_header("Content-Length", "0")
        h.end_headers()

    url, t1, seen = _serve_once(redirect)
    with pytest.raises(rodeo.ControlError):
        rodeo.Client(url, token=TOKEN, timeout=10).command("stop")
    t1.join(timeout=10)
    assert seen == [f"Bearer {TOKEN}"]
    assert seen_elsewhere == [], "the redirect was followed"


def test_an_answer_past_the_limit_is_an_error():
    def huge(h):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()
        chunk = b" " * (1 << 20)
        try:
            for _ in range((rodeo.client.MAX_ANSWER_BYTES >> 20) + 2):
                h.wfile.write(chunk)
        except OSError:
            pass

    url, t, _ = _serve_once(huge)
    with pytest.raises(rodeo.ControlError, match="larger than"):
        rodeo.Client(url, timeout=30).status()
    t.join(timeout=30)
