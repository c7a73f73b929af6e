"""The standalone host: the ``twistd ai-assistant`` service and its parts.

Modules: :mod:`.plugin` (twistd options and ``makeService``), :mod:`.config`
(the TOML configuration), :mod:`.app` (the service tree), :mod:`.console` (the
SSH manhole), :mod:`.demo` (``make demo``), :mod:`.gc_tuning` (opt-in collector
settings).  See ``docs/standalone.md``.
"""
