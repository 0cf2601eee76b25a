"""The StreamSet kind's part of the services: live caption sessions, and whether the frame
watch runs (the daemon's, ``StreamSetKind.background``).

Caption sessions outlive a pass (the daemon keeps them reading); a steady-state pass trusts the
frame watch's recorded proof of a source only when the watch runs in this process.
"""

from __future__ import annotations

from typing import Self

from controllers.kinds.streamset.captions import CaptionHub
from controllers.services import Part, Services


class Streaming(Part):
    def __init__(self) -> None:
        self.hub = CaptionHub()
        self.frames_watched = False  # a FrameWatch runs: see controllers.kinds.streamset.framewatch

    @classmethod
    def made(cls, services: Services) -> Self:
        return cls()

    def close(self) -> None:
        self.hub.close()
