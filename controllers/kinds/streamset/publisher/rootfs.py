"""The publisher image's root filesystem, planned from this Debian machine's own files.

Debian's python3.11, its ``gi`` bindings, GStreamer, the RTSP server library, the few plugins our
pipelines use and everything ``ldd`` says they load make a self-contained root (see
ENVIRONMENT.md, and ``controllers.rootimage`` for why host files and merged-/usr).
"""

from __future__ import annotations

from pathlib import Path

from controllers.errors import PermanentError
from controllers.rootimage import (
    PYTHON,
    STDLIB,
    Item,
    in_usr,
    package_files,
    python_root,
    with_libraries,
)

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


def multiarch_dir() -> Path:
    """``/usr/lib/<triplet>``, found where GStreamer's core plugin lives."""
    found = sorted(Path("/usr/lib").glob("*/gstreamer-1.0/libgstcoreelements.so"))
    if not found:
        raise PermanentError(f"GStreamer is not installed on this machine: {APT_HINT}")
    return found[0].parent.parent


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

    items = python_root()
    items.update(package_files(GI_PACKAGE, ()))
    # _gi_cairo would drag cairo in; the publisher never draws.
    items = {dest: item for dest, item in items.items() if "_gi_cairo" not in dest}
    items, missing = with_libraries(items, [PYTHON, scanner, rtsp_server, *plugins])
    if missing:
        raise PermanentError("libraries of the publisher image are missing on this machine: "
                             f"{'; '.join(sorted(missing)[:5])}: {APT_HINT}")
    for path in [scanner, rtsp_server, *plugins, *typelibs]:
        items[in_usr(path)] = Item(source=path.resolve())
    for dest, source in app_files.items():
        items[dest] = Item(source=source)
    return dict(sorted(items.items()))
