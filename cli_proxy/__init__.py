"""cli-proxy: a gateway that serves OpenAI and Anthropic clients with a CLI agent (the Claude
Code, Gemini or Codex CLI, one backend folder each) as its model.

The package is laid out as the pipeline: ``server/`` (HTTP: routes, wire models, delivery
formats) -> ``gateway.py`` and ``plan/`` (route, prompt, launch spec) -> ``run/``
(admission, login gate, warm pool, process) -> ``read/`` (the CLI's events, the model's
reply) -> back through ``server/delivery``; ``backends/`` holds all that knows one CLI,
``replay/`` records and replays runs (the recordings are the fixtures), ``commands/`` is
the command line (docs/architecture.md).
"""

__version__ = "0.1.0"
