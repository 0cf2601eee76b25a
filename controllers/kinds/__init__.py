"""Every kind's folder: its controller, its observation and its own parts of the services.

One parent for all of them, so the layering contracts (``pyproject.toml``) can say once, for
every kind present and future, that the daemon, the engine, the CLI, the output and the sharing
never import a kind (they reach kinds only through the table, ``specs.kinds.KINDS``, and the
kind contract, ``controllers.contract``).
"""
