"""The Deployment kind: its adapter (``kind``), the controller that acts on Docker, the pure
plan, removal of what it owns, readiness and the runtime facts read from the service's logs."""
