"""The emulator's asset tables composed into one application object.

Why a composition module: streams, captions, files and faults each own their table and lock;
this object builds them from the settings, wires their few cross-links (captions hold streams
"in use"), answers the inventory gauges for metrics and asset stats, registers every endpoint
group, and tears everything down (decoders first) on shutdown or crash.
"""

from __future__ import annotations

import dataclasses
import threading

from emulators.rtvi import admin, cameras, captions, chat, files, streams
from emulators.rtvi.config import ConfigError, Settings
from emulators.rtvi.faults import FaultTable
from emulators.rtvi.knobs import Knobs, KnobValues
from emulators.rtvi.recorder import Recorder
from emulators.rtvi.routing import Router
from emulators.rtvi.validation import Invalid


class Application:
    def __init__(self, settings: Settings) -> None:
        # Every knob starts from the setting of its name (config.py reads the environment).
        start = {f.name: getattr(settings, f.name) for f in dataclasses.fields(KnobValues)}
        self.knobs = Knobs(KnobValues(**start), seed=settings.fail_seed)
        self.faults = FaultTable(settings.fail_rate, settings.fail_seed)
        for fault in settings.faults:
            try:
                self.faults.add_behaviour(admin.parse_behaviour(fault))
            except (Invalid, KeyError) as exc:
                raise ConfigError(f"RTVI_EMU_FAULTS: {exc}") from None
        self.streams = streams.StreamTable(self.knobs, decode=not settings.no_decode)
        self.streams.stuck = self.faults.stuck
        self.captions = captions.CaptionService(self.streams, self.knobs, self.faults)
        self.files = files.FileStore(settings.files_dir)
        self.bus = cameras.BusConfig()
        self.recorder = Recorder(settings.record_path)
        self._requests: dict[str, int] = {}
        self._requests_lock = threading.Lock()

    def count(self, route: str) -> None:
        """Count one request to ``route`` (``"METHOD /template"``)."""
        with self._requests_lock:
            self._requests[route] = self._requests.get(route, 0) + 1

    def requests(self) -> dict[str, int]:
        with self._requests_lock:
            return dict(self._requests)

    def register(self, router: Router) -> None:
        streams.register(router, self.streams, self.knobs)
        captions.register(router, self.captions, self.files)
        files.register(router, self.files)
        chat.register(router, self.streams, self.files, self.knobs)
        cameras.register(router, self.streams, self.knobs, self.bus)
        admin.register(
            router,
            admin.AdminParts(
                self.knobs, self.streams, self.captions, self.faults, self.recorder, self.bus
            ),
            self.stop_decoders,
            self.requests,
        )

    def gauges(self) -> dict[str, float]:
        listed = self.streams.listing()
        snapshots = [stream.decoder.snapshot() for stream in listed]
        file_count, file_bytes = self.files.count_and_bytes()
        return {
            "streams": len(listed),
            "draining_streams": sum(1 for stream in listed if stream.draining),
            "caption_requests": len(self.captions.active()),
            "files": file_count,
            "file_bytes": file_bytes,
            "chunks_total": self.captions.chunks_total,
            "empty_chunks_total": self.captions.empty_chunks_total,
            "decoded_frames_total": sum(s.frame_count for s in snapshots),
            "decoder_restarts_total": sum(s.restarts for s in snapshots),
            "injected_faults_total": self.faults.injected_total,
            **self.captions.times.gauges(),
        }

    def stop_decoders(self) -> None:
        self.captions.shutdown()
        self.streams.shutdown()

    def shutdown(self) -> None:
        self.stop_decoders()
        self.files.shutdown()
