"""RTVI VLM service emulator (stdlib only).

Why it exists: the real RT-VLM container needs NVIDIA images and a GPU, which CI and laptops do
not have. This package answers the HTTP API of ``shared/contracts/`` closely enough that the
product's own client talks to it unchanged -- the published OpenAPI (``rtvi-openapi.json``) is
the authority: bodies, answers and status codes follow it operation by operation -- and it
prints the start-up log lines (vLLM shapes) that the reconciler parses for runtime facts.

Why stdlib only: it runs inside a minimal image that holds nothing but Debian's python3.11 and its
standard library (see ``emulators/image.py``). It shares no code with the product and imports
nothing of it, so a misreading of the API cannot hide in both.

Layout (one concept per module):
- ``config``    -- the environment knobs, parsed once at start-up.
- ``state``     -- the mutable service state (lifecycle phase, request counters) behind one lock.
- ``routing``   -- request/response values and a small route table with ``{param}`` templates.
- ``core``      -- health, models, metrics, metadata and asset-stats endpoints.
- ``lifecycle`` -- the simulated model load: vLLM-shaped log lines, start-up delay, fatal faults.
- ``server``    -- the ``ThreadingHTTPServer`` glue (SSE via chunked coding), signals, ``main()``.
- ``app``       -- composes the asset tables below, registers their routes, tears them down.
- ``knobs``     -- run-time knobs (capacity, latency, drain) changeable through the admin API.
- ``validation``-- strict body checks (unknown keys and bad values give 422).
- ``schema``    -- the spec's request schemas, transcribed, and a small checker for them.
- ``recorder``  -- every ``/v1/`` exchange on the wire, for contract tests (``RTVI_EMU_RECORD``).
- ``colours``   -- frame analysis: nearest named colour of the centre and of the border ring.
- ``ingest``    -- one real ffmpeg decoder per registered stream, restarted with capped backoff.
- ``streams``   -- ``/v1/streams/*``: add, list, delete with drain semantics.
- ``captions``  -- ``/v1/generate_captions``: chunked captions of decoded frames, SSE.
- ``files``/``chat`` -- ``/v1/files`` uploads, ``/v1/chat/completions``, ``/v1/completions``.
- ``cameras``   -- ``/v1/stream/add|remove|get-stream-info`` (VIOS shapes) and ``/v1/config``.
- ``faults``/``admin`` -- injected 5xx/delays, canary faults (swapped or mixed captions, dropped
  chunk IDs, errors in 200 events, empty content, stuck deletes) and the ``/emulator/*`` API.

Run: ``python3 -m emulators.rtvi``. Knobs are documented in ``config``.
"""
