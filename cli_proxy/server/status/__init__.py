"""The status page for people: ``GET /status`` (routes.py), its HTML (page.py) and the last
requests it shows (calls_log.py)."""
