"""A client for the HTTP API of ``rodeo run --http`` (and of any rodeo run-control server).

    import rodeo
    c = rodeo.Client("http://127.0.0.1:8080", token=os.environ["RODEO_TOKEN"])
    c.status()["state"]              # "RUNNING"
    c.metrics()['rodeo_l1_accepts_total{app="supervisor"}']
    c.command("stop")                # -> "CONNECTED", after the dataflow drained

Only the standard library (urllib): nothing to install.
"""

import json
import os
import re
import urllib.error
import urllib.request

__all__ = ["Client", "ControlError", "Unauthorized", "IllegalTransition", "parse_metrics"]

#: Largest answer taken (as ``rodeo ctl``): a larger one is an error, not an answer cut short.
MAX_ANSWER_BYTES = 64 << 20


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """The API never redirects: a redirect is answered as it came, so that the token is never
    sent on to another address (or from https to http)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class ControlError(Exception):
    """A command was refused or failed. ``status`` is the HTTP code, ``body`` the JSON answer."""

    def __init__(self, message, status=None, body=None):
        super().__init__(message)
        self.status = status
        self.body = body or {}


class Unauthorized(ControlError):
    """401: no token, or the wrong one (set ``token=`` or ``RODEO_TOKEN``)."""


class IllegalTransition(ControlError):
    """409: the command is not legal in the current state (the message names the state)."""


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """Prometheus text format -> ``{'name{label="value",...}': float}`` (labels as written)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError(f"not a Prometheus sample line: {line!r}")
        name, labels, value = m.group(1), m.group(2) or "", m.group(4)
        out[name + labels] = float(value)
    return out


def _bounded(response, method, path):
    """The body of ``response``, at most :data:`MAX_ANSWER_BYTES` (else :class:`ControlError`)."""
    body = response.read(MAX_ANSWER_BYTES + 1)
    if len(body) > MAX_ANSWER_BYTES:
        raise ControlError(
            f"{method} {path}: the answer is larger than {MAX_ANSWER_BYTES} bytes: not read"
        )
    return body


class Client:
    """The HTTP API at ``url``; ``token`` (default: ``RODEO_TOKEN``) is sent with commands."""

    def __init__(self, url, token=None, timeout=120.0):
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get("RODEO_TOKEN")
        self.timeout = timeout

    def _request(self, method, path, body=None, auth=False):
        headers = {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if auth and self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with _OPENER.open(req, timeout=self.timeout) as r:
                return r.status, _bounded(r, method, path)
        except urllib.error.HTTPError as e:
            return e.code, _bounded(e, method, path)

    def status(self):
        """``GET /api/status`` as a dict: ``state``, ``run_number``, rates, ``apps``, errors."""
        code, body = self._request("GET", "/api/status")
        if code != 200:
            raise ControlError(f"GET /api/status: HTTP {code}", code)
        return json.loads(body)

    def config(self):
        """``GET /api/config``: the configuration in effect, as TOML text."""
        code, body = self._request("GET", "/api/config")
        if code != 200:
            raise ControlError(f"GET /api/config: HTTP {code}", code)
        return body.decode()

    def metrics_text(self):
        """``GET /metrics``: the Prometheus text page."""
        code, body = self._request("GET", "/metrics")
        if code != 200:
            raise ControlError(f"GET /metrics: HTTP {code}", code)
        return body.decode()

    def metrics(self):
        """``GET /metrics`` as ``{'name{labels}': value}`` (see :func:`parse_metrics`)."""
        return parse_metrics(self.metrics_text())

    def command(self, name):
        """``POST /api/command``; returns the new state. Raises :class:`Unauthorized` (401),
        :class:`IllegalTransition` (409), :class:`ControlError` (anything else)."""
        code, body = self._request("POST", "/api/command", {"command": name}, auth=True)
        try:
            answer = json.loads(body)
        except ValueError:
            answer = {"error": body.decode(errors="replace")}
        if code == 200:
            return answer["state"]
        message = f"{name}: HTTP {code}: {answer.get('error', '')}"
        if code == 401:
            raise Unauthorized(message + " (give token= or set RODEO_TOKEN)", code, answer)
        if code == 409:
            raise IllegalTransition(message, code, answer)
        raise ControlError(message, code, answer)
