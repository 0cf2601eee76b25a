"""The Host kind: its adapter (``kind``), the live session of a Docker engine (local or over
SSH), the shared view of its containers, and its GPUs and their telemetry."""
