"""Build the runner image ``rtvi-runner:<content-hash>``: the run code with what it imports.

Why an image: a run is to execute on its Host, beside the service it measures, and outlive the
reconciler (issue 27); the Host has a Docker engine and nothing of ours. No registry is
reachable, so, like the publisher, the image is a root assembled from this machine's files
(``controllers.rootimage``) and imported over the Docker API, which reaches an ``ssh://`` Host
through its forwarded socket too.

What goes in: Debian's python3.11 and standard library; the installed files of the
distributions the run code imports (``RUNNER_REQUIRES`` and their own requirements, read from
the installed metadata, markers evaluated for this interpreter), under ``SITE``; our packages
``controllers``, ``specs`` and ``state`` under ``APP`` (never the CLI, the daemon, the emulators
or the tests); every shared library any of it loads. Wheels that bundle their libraries (a
``numpy.libs`` folder beside the package, found through the extension's RPATH) keep them there.

Why a content-hash tag: as for the publisher, a repeated call finds the tag and returns at once,
while an edited source or an upgraded package yields a new image.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import re
import threading
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from controllers import rootimage
from controllers.clients.docker_client import DockerEngine
from controllers.errors import PermanentError
from controllers.ownership import LABEL_MANAGED_BY, MANAGED_BY

REPOSITORY = "rtvi-runner"
RECIPE = "runner-image 1"
TAG_HEX = 20
TITLE = "rtvi-runner"
ROOT = "opt/rtvi-runner"
SITE = f"{ROOT}/site"
APP = f"{ROOT}/app"
LABEL_CONTENT_HASH = "rtvi.reconciler/content-hash"
RUNNER_REQUIRES = ("pydantic", "docker", "httpx", "structlog", "tenacity", "PyYAML",
                   "nvidia-ml-py", "matplotlib", "prometheus-client")
"""What the run code imports (``controllers.kinds.experiments.run``, every run type, the plots, the
DCGM exporter's parser); the image test imports all of it inside the image, lazy imports
named too, so a new import that is missing here fails."""
PACKAGES = ("controllers", "specs", "state")
CODE_ROOT = Path(__file__).resolve().parents[4]
_BUILD_LOCK = threading.Lock()


def _key(name: str) -> str:
    """A distribution's normalised name (PEP 503): ``PyYAML`` and ``pyyaml`` are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions(wanted: tuple[str, ...] = RUNNER_REQUIRES) -> list[metadata.Distribution]:
    """``wanted`` and everything they require on this interpreter (markers evaluated, no
    extras), as installed; a missing one is a PermanentError naming it."""
    found: dict[str, metadata.Distribution] = {}
    queue = list(wanted)
    while queue:
        name = queue.pop()
        if _key(name) in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise PermanentError(f"cannot build the runner image: {name} is not installed "
                                 "(run scripts/setup.sh)") from None
        found[_key(name)] = dist
        for text in dist.requires or []:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                queue.append(req.name)
    return [found[key] for key in sorted(found)]


def _site_files(dist: metadata.Distribution) -> dict[str, rootimage.Item]:
    """A distribution's installed files (its RECORD) that lie in its site folder, under
    ``SITE``; scripts and data installed elsewhere stay out."""
    items: dict[str, rootimage.Item] = {}
    for file in dist.files or []:
        parts = Path(str(file)).parts
        if not parts or parts[0] == "..":
            continue
        if rootimage.OPTIMIZED_BYTECODE in parts[-1]:
            continue
        source = Path(str(dist.locate_file(file)))
        if source.is_file():
            items[f"{SITE}/{'/'.join(parts)}"] = rootimage.Item(source=source.resolve())
    return items


def _app_files() -> dict[str, rootimage.Item]:
    items = {}
    for package in PACKAGES:
        for path in sorted((CODE_ROOT / package).rglob("*.py")):
            relative = path.relative_to(CODE_ROOT)
            items[f"{APP}/{relative}"] = rootimage.Item(source=path)
            # its byte code where the checkout has it (scripts/setup.sh); a stale one is
            # ignored at import (it records its source's size and time)
            cached = Path(importlib.util.cache_from_source(str(path)))
            if cached.is_file():
                items[f"{APP}/{cached.relative_to(CODE_ROOT)}"] = rootimage.Item(source=cached)
    return items


def plan() -> dict[str, rootimage.Item]:
    """Every path of the runner's root (relative, sorted)."""
    dists = distributions()
    items = rootimage.python_root()
    bundled = []
    for dist in dists:
        items.update(_site_files(dist))
        bundled.append(Path(str(dist.locate_file(""))).resolve())
    items.update(_app_files())
    items, missing = rootimage.with_libraries(items, [rootimage.PYTHON], tuple(bundled))
    if missing:
        raise PermanentError("libraries of the runner image are missing on this machine: "
                             + "; ".join(sorted(missing)[:5]))
    return items


def image_tag() -> tuple[str, dict[str, rootimage.Item]]:
    """The tag this machine's files would build, and the plan behind it."""
    items = plan()
    content_hash = rootimage.fingerprint(items, f"{RECIPE}\n")
    return f"{REPOSITORY}:{content_hash[:TAG_HEX]}", items


def _changes(content_hash: str) -> list[str]:
    return [
        "ENV PATH=/usr/bin:/bin",
        "ENV LANG=C.UTF-8",
        "ENV HOME=/tmp",
        f"ENV PYTHONPATH=/{APP}:/{SITE}",
        "ENV PYTHONUNBUFFERED=1",
        "ENV PYTHONDONTWRITEBYTECODE=1",
        "ENV MPLBACKEND=Agg",
        "ENV MPLCONFIGDIR=/tmp/matplotlib",
        f'LABEL "{LABEL_MANAGED_BY}"="{MANAGED_BY}"',
        f'LABEL "{LABEL_CONTENT_HASH}"="{content_hash}"',
        f'LABEL "org.opencontainers.image.title"="{TITLE}"',
        'ENTRYPOINT ["python3"]',
    ]


def ensure_runner_image(engine: DockerEngine) -> str:
    """The runner image's ID (``sha256:...``) on ``engine``, imported only when its tag is
    missing there."""
    tag, items = image_tag()
    return rootimage.ensure_image(engine, tag, items, _changes, _BUILD_LOCK)
