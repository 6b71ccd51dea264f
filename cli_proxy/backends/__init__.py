"""CLI backends: one folder each (``claude/``, ``gemini/``, ``codex/``) holding all that knows
that CLI, the interface they implement (``base.py``) and the registry (``registry.py``)."""
