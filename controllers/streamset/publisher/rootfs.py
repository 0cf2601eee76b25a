"""The publisher image's root filesystem, planned from this Debian machine's own files.

Why host files: no container registry is reachable, so there is no ``FROM debian``. Debian's
python3.11, its ``gi`` bindings, GStreamer, the RTSP server library, the few plugins our pipelines
use and everything ``ldd`` says they load make a self-contained root (see ENVIRONMENT.md).

Why merged-/usr: ``ldd`` names ``/lib/x86_64-linux-gnu/libc.so.6`` while Debian 12 has
``/lib -> usr/lib``; every library is stored under ``usr/`` (dereferenced, so alternatives and
versioned links become plain files at the name the loader asks for) and ``/lib``, ``/lib64``,
``/bin``, ``/sbin`` are symlinks into ``usr/``, as on the host.

The plan is a mapping ``destination -> Item`` (a file to copy or a symlink to write); it is pure
apart from reading the host, so its fingerprint decides whether an image must be rebuilt.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from controllers.errors import PermanentError

PYTHON = Path("/usr/bin/python3.11")
STDLIB = Path("/usr/lib/python3.11")
DIST_PACKAGES = Path("/usr/lib/python3/dist-packages")
GI_PACKAGE = DIST_PACKAGES / "gi"
APT_HINT = ("apt-get install -y python3.11 python3-gi gir1.2-gst-rtsp-server-1.0 "
            "gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-ugly "
            "gstreamer1.0-plugins-bad gstreamer1.0-libav")
# Plugins the pipelines in app.py need, and what the RTSP server itself plugs in (rtpbin,
# udpsrc/udpsink, appsrc/appsink for RTP over TCP). Everything else stays out of the image.
PLUGINS = (
    "coreelements", "app", "videotestsrc", "videoconvertscale", "videorate",
    "x264", "rtp", "rtpmanager", "udp", "typefindfunctions", "playback", "isomp4", "matroska",
    "videoparsersbad", "libav",
)
TYPELIBS = (
    "GLib-2.0", "GObject-2.0", "GModule-2.0", "Gio-2.0", "Gst-1.0", "GstBase-1.0", "GstNet-1.0",
    "GstSdp-1.0", "GstRtsp-1.0", "GstRtspServer-1.0",
)
RTSP_SERVER_LIBRARY = "libgstrtspserver-1.0.so.0"
# Not needed to run: tests, GUI toolkits, caches, the static libpython under config-3.11-*.
STDLIB_SKIP = ("test", "tests", "idlelib", "tkinter", "turtledemo", "__pycache__",
               "site-packages", "dist-packages", "lib2to3", "ensurepip")
ROOT_LINKS = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}


@dataclass(frozen=True)
class Item:
    """A file copied from ``source``, or a symlink pointing at ``link``."""

    source: Path | None = None
    link: str | None = None

    def fingerprint(self) -> str:
        if self.source is None:
            return f"-> {self.link}"
        stat = self.source.stat()
        return f"{self.source} {stat.st_size} {stat.st_mtime_ns} {stat.st_mode:o}"


def multiarch_dir() -> Path:
    """``/usr/lib/<triplet>``, found where GStreamer's core plugin lives."""
    found = sorted(Path("/usr/lib").glob("*/gstreamer-1.0/libgstcoreelements.so"))
    if not found:
        raise PermanentError(f"GStreamer is not installed on this machine: {APT_HINT}")
    return found[0].parent.parent


def in_usr(path: Path | str) -> str:
    """Destination of a host path under merged-/usr, relative to the root."""
    text = str(path).lstrip("/")
    return text if text.startswith("usr/") else "usr/" + text


def _ldd_closure(objects: list[Path]) -> tuple[set[str], list[str]]:
    """Libraries the objects load (as the loader names them), and 'object: lib' misses."""
    done = subprocess.run(["ldd", *map(str, objects)], capture_output=True, text=True,
                          check=False)
    libraries: set[str] = set()
    missing: list[str] = []
    owner = str(objects[0])
    for line in done.stdout.splitlines():
        if not line[:1].isspace():
            owner = line.rstrip(":")
            continue
        words = line.split()
        if "not" in words and "found" in words:
            missing.append(f"{owner}: {words[0]}")
        elif "=>" in words and len(words) >= 3 and words[2].startswith("/"):
            libraries.add(words[2])
        elif words and words[0].startswith("/"):
            libraries.add(words[0])  # the dynamic loader itself
    return libraries, missing


def _package_files(top: Path, skip: tuple[str, ...]) -> dict[str, Item]:
    """Regular files (and in-tree relative links) of a Python package tree."""
    items: dict[str, Item] = {}
    for path in sorted(top.rglob("*")):
        relative = path.relative_to(top)
        if any(part in skip or part.startswith("config-3.") for part in relative.parts):
            continue
        if path.is_symlink():
            target = path.resolve()
            if target.is_file():
                items[in_usr(path)] = Item(source=target)
        elif path.is_file():
            items[in_usr(path)] = Item(source=path)
    return items


def _require(paths: list[Path]) -> None:
    absent = [str(path) for path in paths if not path.exists()]
    if absent:
        raise PermanentError(f"cannot build the publisher image, missing {', '.join(absent)}: "
                             f"{APT_HINT}")


def plan(app_files: dict[str, Path]) -> dict[str, Item]:
    """Every path of the root (relative, sorted), with ``app_files`` (destination -> source)."""
    arch = multiarch_dir()
    plugin_dir = arch / "gstreamer-1.0"
    plugins = [plugin_dir / f"libgst{name}.so" for name in PLUGINS]
    typelibs = [arch / "girepository-1.0" / f"{name}.typelib" for name in TYPELIBS]
    scanner = arch / "gstreamer1.0" / "gstreamer-1.0" / "gst-plugin-scanner"
    rtsp_server = arch / RTSP_SERVER_LIBRARY
    _require([PYTHON, STDLIB / "os.py", GI_PACKAGE, scanner, rtsp_server, *plugins, *typelibs])

    items = _package_files(STDLIB, STDLIB_SKIP)
    items.update(_package_files(GI_PACKAGE, ("__pycache__",)))
    # _gi_cairo would drag cairo in; the publisher never draws.
    items = {dest: item for dest, item in items.items() if "_gi_cairo" not in dest}
    binaries = [PYTHON, scanner, rtsp_server, *plugins]
    binaries += [Path("/") / dest for dest in items if dest.endswith(".so")]
    libraries, missing = _ldd_closure(binaries)
    if missing:
        raise PermanentError("libraries of the publisher image are missing on this machine: "
                             f"{'; '.join(sorted(missing)[:5])}: {APT_HINT}")
    for library in libraries:
        items[in_usr(library)] = Item(source=Path(library).resolve())
    for path in [PYTHON, scanner, rtsp_server, *plugins, *typelibs]:
        items[in_usr(path)] = Item(source=path.resolve())
    items["usr/bin/python3"] = Item(link="python3.11")
    for dest, source in app_files.items():
        items[dest] = Item(source=source)
    return dict(sorted(items.items()))


def fingerprint(items: dict[str, Item], extra: str) -> str:
    """Content hash of a plan: what changes it (a Debian upgrade, an edit of app.py, a new
    recipe) gives a new image tag; nothing else does."""
    digest = hashlib.sha256(extra.encode())
    for dest, item in items.items():
        digest.update(f"{dest} {item.fingerprint()}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def progress(message: str) -> None:
    print(f"[publisher.image] {message}", file=sys.stderr, flush=True)
