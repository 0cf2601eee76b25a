"""The StreamSet kind: its adapter (``kind``), controller, plan, teardown, health, the frame
watch and probes, caption sessions, and the published-source publisher.

Kept free of imports: the publisher image carries this package's ``colours``, ``digest`` and
``publisher`` modules with nothing but the stdlib, so importing the package must pull in
nothing else.
"""
