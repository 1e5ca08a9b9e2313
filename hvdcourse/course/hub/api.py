"""The class hub's REST API, as the instructor's service uses it (lesson: Instructor guide).

The service ``hvdcourse`` holds a token (``service-token`` in the hub's state folder) whose role has
``admin:servers``: it starts, lists and stops learners' servers, and reaches them through the proxy.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request

from hvdcourse.runtime.errors import RunFailed


def url_of(settings: dict) -> str:
    """The hub's public address on this machine: https when it serves TLS (the default)."""
    scheme = "https" if settings.get("tls") else "http"
    return f"{scheme}://127.0.0.1:{settings['port']}/"


def pinned_context(cert: str) -> ssl.SSLContext:
    """A TLS context that trusts exactly the hub's certificate ``cert`` (self-signed or a site's:
    a site's names the public host, not 127.0.0.1, so the host name is not checked)."""
    context = ssl.create_default_context(cafile=cert)
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # the certificate itself is the anchor
    context.check_hostname = False
    return context


class Hub:
    """``Hub(url, token)``: ``url`` is the proxy's public address, e.g. ``https://127.0.0.1:8000``;
    ``cert``: the hub's certificate, trusted alone (see :func:`pinned_context`)."""

    def __init__(self, url: str, token: str, cert: str | None = None):
        self.url = url.rstrip("/")
        self.token = token
        self.context = pinned_context(cert) if cert else None

    @classmethod
    def of(cls, settings: dict) -> "Hub":
        """The API of the hub whose settings (``hub.json``) are ``settings``."""
        tls = settings.get("tls") or {}
        return cls(url_of(settings), settings["service_token"], tls.get("cert"))

    def call(self, method: str, path: str, timeout: float = 10) -> tuple:
        """``(status, JSON or text)`` of ``method path`` (``path`` from the hub's root, e.g.
        ``/hub/api/users``); an HTTP error is returned as its status, not raised."""
        request = urllib.request.Request(
            self.url + path, method=method, headers={"Authorization": f"token {self.token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.context) as response:
                status, body = response.status, response.read()
        except urllib.error.HTTPError as err:
            status, body = err.code, err.read()
        text = body.decode("utf-8", "replace")
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text

    def version(self, timeout: float = 2) -> str | None:
        """The hub's version when it answers through the proxy, else None."""
        try:
            status, body = self.call("GET", "/hub/api/", timeout=timeout)
        except (urllib.error.URLError, OSError, ValueError):
            return None
        return body.get("version") if status == 200 and isinstance(body, dict) else None

    def users(self) -> dict:
        """``{name: user model}`` of every user the hub knows."""
        status, body = self.call("GET", "/hub/api/users")
        if status != 200:
            raise RunFailed(f"the hub refused the list of users ({status}): {body}")
        return {user["name"]: user for user in body}

    def start(self, name: str, timeout: float = 30) -> int:
        """Ask for ``name``'s server: 201 (started), 202 (starting) or 400 (already running)."""
        status, body = self.call("POST", f"/hub/api/users/{name}/server", timeout=timeout)
        if status not in (201, 202, 400):
            raise RunFailed(f"the hub did not start {name}'s server ({status}): {body}")
        return status

    def ready(self, name: str) -> bool:
        server = self.users().get(name, {}).get("servers", {}).get("", {})
        return bool(server.get("ready"))

    def wait_ready(self, names: list, timeout: float = 120) -> float:
        """Wait until every server in ``names`` is ready; the seconds it took."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            users = self.users()
            waiting = [n for n in names if not users[n].get("servers", {}).get("", {}).get("ready")]
            if not waiting:
                return time.monotonic() - start
            time.sleep(0.5)
        raise RunFailed(f"servers not ready after {timeout:.0f} s: {', '.join(waiting)}")

    def stop(self, name: str) -> int:
        status, body = self.call("DELETE", f"/hub/api/users/{name}/server", timeout=60)
        if status not in (202, 204, 400):
            raise RunFailed(f"the hub did not stop {name}'s server ({status}): {body}")
        return status

    def wait_stopped(self, names: list, timeout: float = 60) -> float:
        """Wait until no server of ``names`` runs or is stopping; the seconds it took."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            users = self.users()
            running = [n for n in names if users.get(n, {}).get("servers")]
            if not running:
                return time.monotonic() - start
            time.sleep(0.5)
        raise RunFailed(f"servers still running after {timeout:.0f} s: {', '.join(running)}")

    def delete_user(self, name: str) -> bool:
        """Forget ``name`` (their server is stopped first by the hub); False if the hub never knew
        them."""
        status, body = self.call("DELETE", f"/hub/api/users/{name}", timeout=60)
        if status not in (204, 404):
            raise RunFailed(f"the hub did not remove the user {name} ({status}): {body}")
        return status == 204
