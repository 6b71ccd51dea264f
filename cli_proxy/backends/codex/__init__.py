"""The Codex CLI backend: ``backend.py`` (argv, config, private home), ``catalog.py`` (the
sealed model catalog), ``items.py`` (the request as codex items), ``rpc.py`` (the JSON-RPC
handshake), ``parser.py`` (reading app-server), ``login.py`` (the ChatGPT login)."""
