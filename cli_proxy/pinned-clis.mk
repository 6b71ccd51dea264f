# The CLI releases the test suite runs on. The Makefile includes this file (`make test`
# installs these from npm; `make test CLIS=latest` overrides the versions) and
# `cli-proxy doctor` reads it to say whether an installed CLI is one the tests cover.
# Shipped in the wheel. One pair of lines per backend: <NAME>_NPM and <NAME>_VERSION.
CLAUDE_NPM     := @anthropic-ai/claude-code
CLAUDE_VERSION ?= 2.1.197
GEMINI_NPM     := @google/gemini-cli
GEMINI_VERSION ?= 0.61.0
CODEX_NPM      := @openai/codex
CODEX_VERSION  ?= 0.169.0
COPILOT_NPM    := @github/copilot
COPILOT_VERSION ?= 1.0.102
