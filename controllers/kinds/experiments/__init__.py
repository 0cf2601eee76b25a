"""Experiments: runs that happen once against a fresh service and leave verifiable evidence.

``run`` drives one run through its phases (Preflight → Running → Collecting → CleaningUp →
terminal) and writes the evidence; ``board`` runs them beside the work queue with their own
worker limit; ``canary`` is the canary executor; the rest are its parts (the run's service,
its sources and streams, caption capture, the pure isolation and ledger judgements, cleanup).
"""
