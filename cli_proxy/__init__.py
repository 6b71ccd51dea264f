"""cli-proxy: an OpenAI-compatible gateway that runs the Claude Code or Gemini CLI as its model."""

__version__ = "0.1.0"
