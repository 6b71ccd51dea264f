"""The Claude Code CLI backend (``claude -p --output-format stream-json --verbose``):
``backend.py`` (argv, sealed environment, prompt encoding), ``parser.py`` (reading
stream-json), ``login.py`` (the claude.ai login)."""
