"""Build the publisher image ``rtvi-publisher:<content-hash>`` through our Docker client.

Why a tarball imported over the API (not ``docker build``): the root is assembled from this
machine's Debian files (see ``rootfs``) and written straight into a tar stream; the engine only
has to import it, which also works for a remote engine reached through a forwarded socket.

Why a content-hash tag: the tag covers every input file (path, size, mtime), the app's sources
and the recipe version, so a second call finds the tag and returns at once, while a Debian
upgrade or an edited ``app.py`` yields a new image.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from controllers import rootimage
from controllers.clients.docker_client import DockerEngine
from controllers.kinds.streamset.publisher import rootfs
from controllers.ownership import LABEL_MANAGED_BY, MANAGED_BY

REPOSITORY = "rtvi-publisher"
RECIPE = "publisher-image 1"
TAG_HEX = 20
APP_ROOT = "opt/rtvi-publisher"
CONTAINER_PORT = 8554
LABEL_CONTENT_HASH = "rtvi.reconciler/content-hash"
TITLE = "rtvi-publisher"
_PACKAGE = Path(__file__).resolve().parent
_STREAMSET = _PACKAGE.parent
_CONTROLLERS = _STREAMSET.parent
# The app and the stdlib-only modules it imports; nothing that needs docker-py.
APP_SOURCES = {
    f"{APP_ROOT}/controllers/__init__.py": _CONTROLLERS / "__init__.py",
    f"{APP_ROOT}/controllers/kinds/streamset/__init__.py": _STREAMSET / "__init__.py",
    f"{APP_ROOT}/controllers/kinds/streamset/colours.py": _STREAMSET / "colours.py",
    f"{APP_ROOT}/controllers/kinds/streamset/digest.py": _STREAMSET / "digest.py",
    f"{APP_ROOT}/controllers/kinds/streamset/publisher/__init__.py": _PACKAGE / "__init__.py",
    f"{APP_ROOT}/controllers/kinds/streamset/publisher/app.py": _PACKAGE / "app.py",
}
_BUILD_LOCK = threading.Lock()


def _environment(arch: Path) -> dict[str, str]:
    """GStreamer finds only our plugins, writes its registry cache to the writable /tmp, and
    ``gi`` finds only the typelibs we copied."""
    return {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": "/tmp",
        "XDG_CACHE_HOME": "/tmp",
        "PYTHONPATH": f"/{APP_ROOT}",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "GST_PLUGIN_SYSTEM_PATH": str(arch / "gstreamer-1.0"),
        "GST_PLUGIN_SCANNER": str(arch / "gstreamer1.0" / "gstreamer-1.0" / "gst-plugin-scanner"),
        "GST_REGISTRY_1_0": "/tmp/gst-registry.bin",
        "GI_TYPELIB_PATH": str(arch / "girepository-1.0"),
    }


def _changes(arch: Path, content_hash: str) -> list[str]:
    changes = [f"ENV {key}={value}" for key, value in _environment(arch).items()]
    changes += [
        f'LABEL "{LABEL_MANAGED_BY}"="{MANAGED_BY}"',
        f'LABEL "{LABEL_CONTENT_HASH}"="{content_hash}"',
        f'LABEL "org.opencontainers.image.title"="{TITLE}"',
        f"EXPOSE {CONTAINER_PORT}/tcp",
        'ENTRYPOINT ["python3", "-m", "controllers.kinds.streamset.publisher.app"]',
    ]
    return changes


def image_tag() -> tuple[str, dict[str, rootimage.Item]]:
    """The tag this machine's files would build, and the plan behind it."""
    items = rootfs.plan(APP_SOURCES)
    app_digest = hashlib.sha256()
    for source in APP_SOURCES.values():
        app_digest.update(source.read_bytes())
    content_hash = rootimage.fingerprint(items, f"{RECIPE}\n{app_digest.hexdigest()}\n")
    return f"{REPOSITORY}:{content_hash[:TAG_HEX]}", items


def ensure_publisher_image(engine: DockerEngine) -> str:
    """The publisher image's ID (``sha256:...``), imported only when its tag is missing."""
    tag, items = image_tag()
    arch = rootfs.multiarch_dir()
    return rootimage.ensure_image(engine, tag, items,
                                  lambda content_hash: _changes(arch, content_hash), _BUILD_LOCK)
