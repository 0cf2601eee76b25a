"""VST (Video Storage Toolkit) sensor-API emulator that re-publishes sensors over real RTSP.

Why it exists: the real VST container is not available here, yet the reconciler must register
cameras with it, hand RTVI its ``/live/<sensorId>`` URLs and notice when VST stops serving. This
package answers ``shared/contracts/vst-api.md`` and relays each sensor's source on a real RTSP
path, so consumers decode real frames through it.

Why Debian's ``/usr/bin/python3``: the relay needs GStreamer's RTSP server through ``gi``, which
only that interpreter has. Standard library plus ``gi``; nothing of the product is imported.

Layout:
- ``knobs``   -- environment knobs, read once at start-up.
- ``relay``   -- the GstRtspServer and its GLib loop thread; one ``/live/<id>`` mount per sensor.
- ``sensors`` -- the inventory and the injected faults behind one lock; drives the relay.
- ``api``     -- the ``/vst/api/v1`` routes, the ``/emulator`` admin routes, validation.
- ``server``  -- the HTTP server, signal handling and ``main()``.

Run: ``/usr/bin/python3 -m emulators.vst`` from the repository root. Admin API (tests only):
``POST /emulator/sensors/{id}/drop`` and ``/restore``, ``POST /emulator/faults``
(``{"op": "add", "count": N, "status": 500}``) and ``GET /emulator/state``.
"""
