"""RTVI VLM service emulator (stdlib only).

Why it exists: the real RT-VLM container needs NVIDIA images and a GPU, which CI and laptops do
not have. This package answers the HTTP API in ``shared/contracts/rtvi-api.md`` closely enough that
the product's own client talks to it unchanged, and it prints the start-up log lines (vLLM shapes)
that the reconciler parses for runtime facts.

Why stdlib only: it runs inside a minimal image that holds nothing but Debian's python3.11 and its
standard library (see ``emulators/image.py``). It shares no code with the product and imports
nothing of it, so a misreading of the API cannot hide in both.

Layout (one concept per module):
- ``config``    -- the environment knobs, parsed once at start-up.
- ``state``     -- the mutable service state (lifecycle phase, request counters) behind one lock.
- ``routing``   -- request/response values and a small route table with ``{param}`` templates.
- ``core``      -- health, models, metrics, metadata and asset-stats endpoints.
- ``lifecycle`` -- the simulated model load: vLLM-shaped log lines, start-up delay, fatal faults.
- ``server``    -- the ``ThreadingHTTPServer`` glue, signal handling and ``main()``.

Later endpoint groups (streams, captions, chat, files) add a module with a ``register(router)``
function and are wired in ``server.build_router``.

Run: ``python3 -m emulators.rtvi``. Knobs are documented in ``config``.
"""
