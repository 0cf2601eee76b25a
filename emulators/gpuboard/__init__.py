"""An emulated GPU for telemetry tests: a DCGM exporter's ``/metrics`` over one GPU whose
memory is what emulated services say they allocate.

Why: GPU memory back near its baseline after cleanup is a gate, and this machine has no GPU.
The RTVI emulator, given ``RTVI_EMU_GPU_BOARD`` (this server's URL), allocates
``RTVI_EMU_GPU_MIB`` when its model is loaded and releases it on shutdown, keeping
``RTVI_EMU_GPU_LEAK_MIB`` (a leak). The board outlives the services, as a GPU does.

- ``GET /metrics``: ``DCGM_FI_DEV_FB_USED``/``FREE``/``RESERVED`` and ``DCGM_FI_DEV_GPU_UTIL``
  (labels ``gpu``, ``UUID``), as the DCGM exporter writes them.
- ``POST /alloc`` ``{"owner": str, "mib": int}``: that owner holds ``mib``.
- ``POST /free`` ``{"owner": str, "keep_mib": int}``: it now holds ``keep_mib`` (0: nothing).

Run: ``python3 -m emulators.gpuboard --port 0 [--uuid GPU-...] [--total-mib 81559]``; the first
line on stdout is ``listening on http://127.0.0.1:<port>``. Loopback only.
"""
