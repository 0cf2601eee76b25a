"""The RTSP publisher that runs inside an ``rtvi-publisher`` container (Debian python3.11 + gi).

One container serves one source on one mount, so a StreamSet's sources start, fail and stop
independently. Configuration comes from the environment only (the container request sets it):

- ``PUBLISH_KIND``    ``colour`` (default) or ``file``.
- ``PUBLISH_COLOUR``  colour sources: a palette name (``controllers.kinds.streamset.colours``) or
  ``#RRGGBB``.
- ``PUBLISH_BORDER``  optional border colour (same forms); the border is ~1/8 of the height wide,
                      so a probe can tell "RED with a BLUE border" from "solid RED".
- ``PUBLISH_WIDTH`` / ``PUBLISH_HEIGHT``  frame size, default 320x240.
- ``PUBLISH_FPS``     frames per second, default 10 (also the key-frame interval: a new client
                      waits at most one second for a picture).
- ``PUBLISH_PATH``    mount path, default ``/stream``.
- ``PUBLISH_PORT``    RTSP port inside the container, default 8554.
- ``PUBLISH_FILE``    file sources: path of the media file inside the container (bind-mounted
                      read-only).
- ``PUBLISH_SHA256``  file sources: expected sha256; checked before anything is served.

Exit codes: 0 after SIGTERM/SIGINT, 2 bad configuration, 3 sha256 mismatch (one line
``sha256 mismatch for <file>: expected <x>, got <y>``), 4 the media could not be decoded.

Why files go through appsink -> appsrc: the RTSP server owns the served pipeline and ends the
media at EOS. Decoding in a pipeline of our own, paced by its clock (``appsink sync=true``),
lets us loop by seeking back to the start (or restarting when a demuxer cannot seek) while the
served pipeline sees one endless live stream that it time-stamps itself. Re-encoding to H.264
means any input GStreamer can decode is served the same way.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

from controllers.kinds.streamset.colours import RGB, UnknownColour, argb_hex, parse_colour  # noqa: E402
from controllers.kinds.streamset.digest import file_sha256, mismatch_message, normalise_sha256  # noqa: E402

EXIT_CONFIG = 2
EXIT_SHA256 = 3
EXIT_MEDIA = 4
DEFAULT_PORT = 8554
BORDER_FRACTION = 8  # border width = height / 8
ENCODER = (
    "x264enc tune=zerolatency speed-preset=ultrafast key-int-max={fps} threads=1 "
    "! rtph264pay name=pay0 pt=96 config-interval=-1"
)  # threads=1: one slice per frame, so a client joining mid-frame never decodes half a picture


class ConfigError(Exception):
    """The environment does not describe a source we can serve."""


@dataclass(frozen=True)
class Config:
    kind: str
    width: int
    height: int
    fps: int
    path: str
    port: int
    colour: RGB | None = None
    border: RGB | None = None
    file: str | None = None
    sha256: str | None = None

    @property
    def raw_caps(self) -> str:
        return (f"video/x-raw,format=I420,width={self.width},height={self.height},"
                f"framerate={self.fps}/1,pixel-aspect-ratio=1/1")


def _positive(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "") or str(default)
    if not text.isdigit() or int(text) <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {text!r}")
    return int(text)


def _colour(env: Mapping[str, str], name: str) -> RGB | None:
    text = env.get(name, "")
    if not text:
        return None
    try:
        return parse_colour(text)
    except UnknownColour as exc:
        raise ConfigError(f"{name}: {exc}") from exc


def load_config(env: Mapping[str, str]) -> Config:
    kind = env.get("PUBLISH_KIND", "colour")
    path = env.get("PUBLISH_PATH", "/stream")
    if not path.startswith("/"):
        raise ConfigError(f"PUBLISH_PATH must start with '/', got {path!r}")
    common: dict[str, Any] = {
        "kind": kind, "path": path,
        "width": _positive(env, "PUBLISH_WIDTH", 320),
        "height": _positive(env, "PUBLISH_HEIGHT", 240),
        "fps": _positive(env, "PUBLISH_FPS", 10),
        "port": _positive(env, "PUBLISH_PORT", DEFAULT_PORT),
    }
    if common["width"] % 2 or common["height"] % 2:
        raise ConfigError("PUBLISH_WIDTH and PUBLISH_HEIGHT must be even (I420)")
    if kind == "colour":
        colour = _colour(env, "PUBLISH_COLOUR")
        if colour is None:
            raise ConfigError("PUBLISH_COLOUR is required when PUBLISH_KIND=colour")
        return Config(colour=colour, border=_colour(env, "PUBLISH_BORDER"), **common)
    if kind == "file":
        file = env.get("PUBLISH_FILE", "")
        if not file:
            raise ConfigError("PUBLISH_FILE is required when PUBLISH_KIND=file")
        return Config(file=file, sha256=env.get("PUBLISH_SHA256") or None, **common)
    raise ConfigError(f"PUBLISH_KIND must be 'colour' or 'file', got {kind!r}")


def border_width(height: int) -> int:
    """About 1/8 of the height, even (I420 chroma), at least 2."""
    return max(2, height // BORDER_FRACTION // 2 * 2)


def colour_launch(cfg: Config) -> str:
    """The served pipeline of a solid colour source."""
    assert cfg.colour is not None
    return (f"( videotestsrc is-live=true pattern=solid-color "
            f"foreground-color={argb_hex(cfg.colour)} "
            f"! video/x-raw,width={cfg.width},height={cfg.height},framerate={cfg.fps}/1 "
            f"! videoconvert ! video/x-raw,format=I420 ! {ENCODER.format(fps=cfg.fps)} )")


def framed_picture(cfg: Config) -> bytes:
    """One RGB frame: the colour inside a border of ``border_width`` pixels.

    Why drawn here and fed through appsrc: the pixels are exact by construction, it needs no
    compositor of two live sources (whose start-up frames depend on timing), and videobox can
    only fill with a few fixed colours."""
    assert cfg.colour is not None
    assert cfg.border is not None
    edge = border_width(cfg.height)
    inside, frame = bytes(cfg.colour), bytes(cfg.border)
    full_row = frame * cfg.width
    inner_row = frame * edge + inside * (cfg.width - 2 * edge) + frame * edge
    return full_row * edge + inner_row * (cfg.height - 2 * edge) + full_row * edge


def appsrc_launch(cfg: Config, caps: str) -> str:
    return (
        f'( appsrc name=src is-live=true do-timestamp=true format=time caps="{caps}" '
        "! queue max-size-buffers=4 leaky=downstream ! videoconvert ! video/x-raw,format=I420 "
        f"! {ENCODER.format(fps=cfg.fps)} )"
    )


class Feeder:
    """Hands raw frames to every served media (a shared media is re-created after idle
    periods, so there may be a new appsrc at any time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: list[Any] = []

    def attach(self, media: Any) -> None:
        source = media.get_element().get_by_name("src")
        with self._lock:
            self._sources.append(source)
        media.connect("unprepared", lambda _media: self._detach(source))

    def _detach(self, source: Any) -> None:
        with self._lock:
            if source in self._sources:
                self._sources.remove(source)

    def push(self, data: bytes) -> None:
        with self._lock:
            sources = list(self._sources)
        for source in sources:
            # A fresh buffer without timestamps: the served pipeline stamps it on arrival.
            source.emit("push-buffer", Gst.Buffer.new_wrapped(data))

    def stop(self) -> None:
        """Nothing to release by default."""


class FramePump(Feeder):
    """Pushes one fixed picture ``fps`` times a second (bordered colour sources)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.caps = (f"video/x-raw,format=RGB,width={cfg.width},height={cfg.height},"
                     f"framerate={cfg.fps}/1")
        self._picture = framed_picture(cfg)
        GLib.timeout_add(max(1, 1000 // cfg.fps), self._tick)

    def _tick(self) -> bool:
        self.push(self._picture)
        return True


class FileLoop(Feeder):
    """Decodes the file in real time, forever, and hands each frame to the served media."""

    def __init__(self, cfg: Config, on_fatal: Any) -> None:
        assert cfg.file is not None
        super().__init__()
        self.caps = cfg.raw_caps
        self.loops = 0
        self._on_fatal = on_fatal
        self.pipeline = Gst.parse_launch(
            "filesrc name=file ! decodebin ! videoconvert ! videoscale ! videorate "
            f'! capsfilter caps="{cfg.raw_caps}" '
            "! appsink name=sink sync=true max-buffers=2 drop=true emit-signals=true"
        )
        self.location = cfg.file
        self.pipeline.get_by_name("file").set_property("location", cfg.file)
        self.pipeline.get_by_name("sink").connect("new-sample", self._on_sample)
        bus = self.pipeline.get_bus()
        bus.add_signal_watch()
        bus.connect("message", self._on_message)

    def _on_sample(self, sink: Any) -> Any:
        sample = sink.emit("pull-sample")
        buffer = sample.get_buffer()
        ok, info = buffer.map(Gst.MapFlags.READ)
        if not ok:
            return Gst.FlowReturn.OK
        try:
            data = bytes(info.data)
        finally:
            buffer.unmap(info)
        self.push(data)
        return Gst.FlowReturn.OK

    def start(self) -> None:
        self.pipeline.set_state(Gst.State.PLAYING)

    def stop(self) -> None:
        self.pipeline.set_state(Gst.State.NULL)

    def _on_message(self, _bus: Any, message: Any) -> None:
        if message.type == Gst.MessageType.EOS:
            self.loops += 1
            print(f"end of file reached; looping ({self.loops})", flush=True)
            flags = Gst.SeekFlags.FLUSH | Gst.SeekFlags.KEY_UNIT
            if not self.pipeline.seek_simple(Gst.Format.TIME, flags, 0):
                self.pipeline.set_state(Gst.State.NULL)  # cannot seek: start over
                self.pipeline.set_state(Gst.State.PLAYING)
        elif message.type == Gst.MessageType.ERROR:
            error, _debug = message.parse_error()
            self._on_fatal(f"cannot decode {self.location}: {error.message}")


def check_file(cfg: Config) -> None:
    """Refuse to serve a file that is missing or is not the pinned content."""
    assert cfg.file is not None
    if not os.access(cfg.file, os.R_OK):
        raise ConfigError(f"PUBLISH_FILE {cfg.file} is not readable inside the container")
    if cfg.sha256 is not None:
        got = file_sha256(cfg.file)
        if got != normalise_sha256(cfg.sha256):
            print(mismatch_message(cfg.file, cfg.sha256, got), file=sys.stderr, flush=True)
            raise SystemExit(EXIT_SHA256)


def serve(cfg: Config) -> int:
    Gst.init(None)
    loop = GLib.MainLoop()
    outcome = {"code": 0}

    def fatal(message: str) -> None:
        print(message, file=sys.stderr, flush=True)
        outcome["code"] = EXIT_MEDIA
        loop.quit()

    def stop() -> bool:
        loop.quit()
        return GLib.SOURCE_REMOVE  # type: ignore[no-any-return]

    for signum in (signal.SIGTERM, signal.SIGINT):
        GLib.unix_signal_add(GLib.PRIORITY_HIGH, signum, stop)

    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_shared(True)
    feeder: FileLoop | FramePump | None = None
    if cfg.kind == "file":
        feeder = FileLoop(cfg, fatal)
        feeder.start()
    elif cfg.border is not None:
        feeder = FramePump(cfg)
    if feeder is None:
        factory.set_launch(colour_launch(cfg))
    else:
        factory.set_launch(appsrc_launch(cfg, feeder.caps))
        factory.connect("media-configure", lambda _factory, media: feeder.attach(media))
    server = GstRtspServer.RTSPServer()
    server.set_address("0.0.0.0")
    server.set_service(str(cfg.port))
    server.get_mount_points().add_factory(cfg.path, factory)
    if server.attach(None) == 0:
        print(f"cannot listen on port {cfg.port}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    print(f"serving {cfg.kind} on rtsp://0.0.0.0:{cfg.port}{cfg.path}", flush=True)
    loop.run()
    if feeder is not None:
        feeder.stop()
    return outcome["code"]


def main() -> int:
    try:
        cfg = load_config(os.environ)
        if cfg.kind == "file":
            check_file(cfg)
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    return serve(cfg)


if __name__ == "__main__":
    raise SystemExit(main())
