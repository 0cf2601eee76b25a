"""Image references as Docker reads them, and the Host rules about registries. Pure.

A reference ``[registry[:port]/]path[:tag][@sha256:hex]`` names its registry by its first
component when that component looks like a host (a dot, a port, or ``localhost``); otherwise
the image lives on Docker Hub (``docker.io``). That is Docker's own rule, so the reconciler
looks up a Host's credentials for exactly the registry its engine will contact.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from specs.models import Host, HostSpec, RegistryLogin
from specs.rules import Finding

DOCKER_HUB = "docker.io"
HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
HUB_SERVER_ADDRESS = "https://index.docker.io/v1/"  # what Docker's auth config calls the Hub
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
R_REGISTRIES = "Host registries: one login per registry, its password by reference"


@dataclass(frozen=True)
class ImageRef:
    """One image reference, taken apart."""

    text: str  # as the spec wrote it
    registry: str  # "docker.io" when none is named
    repository: str  # the path, without the registry ("nvidia/vss-engine/rt-vlm")
    tag: str | None
    digest: str | None  # "sha256:<64 hex>" when pinned

    @property
    def name(self) -> str:
        """``registry/path`` as it appears in an engine's RepoDigests (the Hub's short form
        for Hub images, as Docker writes them)."""
        if self.registry == DOCKER_HUB:
            return self.repository.removeprefix("library/")
        return f"{self.registry}/{self.repository}"

    @property
    def pull(self) -> str:
        """What to ask the engine for: by digest when pinned (a tag beside it is ignored by
        the engine anyway), else by tag (``latest`` when none)."""
        if self.digest is not None:
            return f"{self.name}@{self.digest}"
        return f"{self.name}:{self.tag or 'latest'}"

    @property
    def pinned(self) -> bool:
        return self.digest is not None and DIGEST_RE.match(self.digest) is not None

    def on(self, registry: str) -> ImageRef:
        """The same repository, tag and digest in another registry (a mirror's copy)."""
        text = f"{registry}/{self.repository}" + (f":{self.tag}" if self.tag else "") + (
            f"@{self.digest}" if self.digest else "")
        return ImageRef(text, registry, self.repository, self.tag, self.digest)

    def digest_ref(self, digest: str) -> str:
        """``name@digest``: how an engine lists a pulled image's repo digest."""
        return f"{self.name}@{digest}"


def parse_image(text: str) -> ImageRef:
    """Take a reference apart (it has passed the model's grammar)."""
    rest, _, digest = text.partition("@")
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, remainder
    else:
        registry, path = DOCKER_HUB, rest
    tag: str | None = None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, _, tag = path.rpartition(":")
    if registry in HUB_ALIASES:
        registry = DOCKER_HUB
        if "/" not in path:
            path = f"library/{path}"
    return ImageRef(text, registry, path, tag, digest or None)


def source_of(host: HostSpec, ref: ImageRef) -> ImageRef:
    """Where ``host``'s engine gets ``ref``: its mirror when it has one, else its registry."""
    mirror = host.images.mirror
    return ref if mirror is None or mirror == ref.registry else ref.on(mirror)


def login_for(logins: Sequence[RegistryLogin], registry: str) -> RegistryLogin | None:
    """A Host's login (of ``logins``) for ``registry`` (the Hub's aliases are one registry)."""
    wanted = DOCKER_HUB if registry in HUB_ALIASES else registry
    for login in logins:
        server = DOCKER_HUB if login.server in HUB_ALIASES else login.server
        if server == wanted:
            return login
    return None


def server_address(registry: str) -> str:
    """The ``serveraddress`` of an engine's auth config for ``registry``."""
    return HUB_SERVER_ADDRESS if registry == DOCKER_HUB else registry


def check_host(host: Host) -> list[Finding]:
    """Observation-free Host rules: each registry named once, each password one reference."""
    return list(_registry_findings(host.spec))


def _registry_findings(spec: HostSpec) -> Iterator[Finding]:
    seen: dict[str, int] = {}
    for i, login in enumerate(spec.registries):
        path = ("spec", "registries", i)
        password = login.password
        if (password.fromEnv is None) == (password.fromFile is None):
            yield Finding((*path, "password"), "give exactly one of fromEnv or fromFile",
                          R_REGISTRIES)
        server = DOCKER_HUB if login.server in HUB_ALIASES else login.server
        if server in seen:
            yield Finding((*path, "server"), f"registry {login.server} has a login already "
                          f"(spec.registries[{seen[server]}]); one login per registry",
                          R_REGISTRIES)
        seen.setdefault(server, i)
