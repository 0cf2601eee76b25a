"""How much an image weighs before it is pulled: its manifest, read from the registry.

Docker's API has no call that tells an image's size before pulling it, and a pull that runs a
Host's disk full leaves a half-pulled image and a sick engine. The registry's manifest lists
every layer's compressed size, so the reconciler reads it (the Distribution API v2, with the
same credentials the pull will use, Basic or a Bearer token as the registry asks) and compares
it with the room under the engine's data root first.

TLS is verified as Docker verifies it: the system's authorities plus the registry's own
``/etc/docker/certs.d/<registry>/ca.crt`` on this machine, where an operator who runs a private
registry puts its certificate. Credentials go in the requests' headers only.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

CERTS_D = Path("/etc/docker/certs.d")
TIMEOUT_S = 15.0
HUB_API = "registry-1.docker.io"
MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))
LIST_TYPES = ("application/vnd.oci.image.index.v1+json",
              "application/vnd.docker.distribution.manifest.list.v2+json")
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
HTTP_UNAUTHORIZED = 401


class RegistryUnavailable(Exception):
    """The manifest could not be read (the message says why, never a credential)."""


@dataclass(frozen=True)
class ManifestSize:
    digest: str  # of the platform's manifest
    compressed_bytes: int  # its config and layers, as the registry stores them


def manifest_size(registry: str, repository: str, reference: str,
                  login: tuple[str, str] | None, platform: str = "linux/amd64",
                  certs_d: Path = CERTS_D) -> ManifestSize:
    """The compressed size of ``registry/repository`` at ``reference`` (a tag or digest) for
    ``platform`` (``os/arch``); raises RegistryUnavailable."""
    host = HUB_API if registry == "docker.io" else registry
    with httpx.Client(verify=_tls(registry, certs_d), timeout=TIMEOUT_S,
                      follow_redirects=True) as client:
        session = _Session(client, f"https://{host}/v2/{repository}", repository, login)
        manifest, digest = session.get(reference)
        if manifest.get("mediaType") in LIST_TYPES or "manifests" in manifest:
            chosen = _for_platform(manifest, platform)
            manifest, digest = session.get(chosen)
    layers = manifest.get("layers") or []
    config = manifest.get("config") or {}
    total = int(config.get("size") or 0) + sum(int(layer.get("size") or 0) for layer in layers)
    return ManifestSize(digest, total)


def _tls(registry: str, certs_d: Path) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca = certs_d / registry / "ca.crt"
    if ca.is_file():
        context.load_verify_locations(cafile=str(ca))
    return context


def _for_platform(index: dict[str, Any], platform: str) -> str:
    os_name, _, arch = platform.partition("/")
    for entry in index.get("manifests") or []:
        plat = entry.get("platform") or {}
        if plat.get("os") == os_name and plat.get("architecture") == arch:
            return str(entry["digest"])
    raise RegistryUnavailable(f"the image has no manifest for {platform}")


class _Session:
    """GETs under one repository, answering the registry's auth challenge once."""

    def __init__(self, client: httpx.Client, base: str, repository: str,
                 login: tuple[str, str] | None) -> None:
        self.client, self.base, self.repository, self.login = client, base, repository, login
        self.headers: dict[str, str] = {"Accept": MANIFEST_TYPES}
        self.auth: httpx.Auth | None = None

    def get(self, reference: str) -> tuple[dict[str, Any], str]:
        url = f"{self.base}/manifests/{reference}"
        try:
            response = self._send(url)
            if response.status_code == HTTP_UNAUTHORIZED:
                self._answer(response.headers.get("www-authenticate", ""))
                response = self._send(url)
        except httpx.HTTPError as exc:
            raise RegistryUnavailable(f"{type(exc).__name__}: {exc}") from None
        if response.status_code != httpx.codes.OK:
            raise RegistryUnavailable(f"HTTP {response.status_code} for the manifest: "
                                      f"{response.text[:200]}")
        try:
            body = response.json()
        except ValueError:
            raise RegistryUnavailable("the manifest is not JSON") from None
        if not isinstance(body, dict):
            raise RegistryUnavailable("the manifest is not a JSON object")
        return body, response.headers.get("docker-content-digest", reference)

    def _send(self, url: str) -> httpx.Response:
        return self.client.get(url, headers=self.headers,
                               auth=self.auth or httpx.USE_CLIENT_DEFAULT)

    def _answer(self, challenge: str) -> None:
        scheme = challenge.split(" ", 1)[0].lower()
        if scheme == "basic":
            if self.login is None:
                raise RegistryUnavailable("the registry wants credentials; the Host has no "
                                          "login for it (spec.registries)")
            self.auth = httpx.BasicAuth(*self.login)
            return
        if scheme != "bearer":
            raise RegistryUnavailable(f"unknown auth scheme {scheme[:20]!r}")
        fields = dict(_CHALLENGE.findall(challenge))
        params = {"service": fields.get("service", ""),
                  "scope": fields.get("scope", f"repository:{self.repository}:pull")}
        auth = httpx.BasicAuth(*self.login) if self.login else httpx.USE_CLIENT_DEFAULT
        reply = self.client.get(fields.get("realm", ""), params=params, auth=auth)
        if reply.status_code != httpx.codes.OK:
            raise RegistryUnavailable(f"the token service answered HTTP {reply.status_code}")
        token = reply.json().get("token") or reply.json().get("access_token")
        if not token:
            raise RegistryUnavailable("the token service gave no token")
        self.headers["Authorization"] = f"Bearer {token}"
