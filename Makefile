# cli-proxy: `make run` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
HOST   ?= 127.0.0.1
PORT   ?= 8080
ARGS   ?=
# Real CLIs for the real-CLI tests, `make fixtures` and `make bench`, installed project-locally
# from npm: pinned by default (cli_proxy/pinned-clis.mk, which `cli-proxy doctor` reads too);
# `make test CLIS=latest` runs the suite on the newest releases.
CLIS           ?= pinned
include cli_proxy/pinned-clis.mk
ifeq ($(CLIS),latest)
CLAUDE_VERSION := $(shell npm view $(CLAUDE_NPM) version 2>/dev/null || echo latest)
GEMINI_VERSION := $(shell npm view $(GEMINI_NPM) version 2>/dev/null || echo latest)
CODEX_VERSION  := $(shell npm view $(CODEX_NPM) version 2>/dev/null || echo latest)
COPILOT_VERSION := $(shell npm view $(COPILOT_NPM) version 2>/dev/null || echo latest)
endif
CLI_DIR        ?= .cli/claude-$(CLAUDE_VERSION)_gemini-$(GEMINI_VERSION)_codex-$(CODEX_VERSION)_copilot-$(COPILOT_VERSION)
# google-genai's newest line in a small venv of its own: google-adk (a dev dependency) holds the
# main venv's google-genai below 3 (docs/gemini-api.md). Pinned to the newest release when last
# bumped; `make test GENAI=latest` takes PyPI's newest (as CLIS=latest does for the CLIs).
GENAI          ?= pinned
GENAI_VERSION  ?= 3.6.1
ifeq ($(GENAI),latest)
GENAI_VERSION  := $(shell $(PYTHON) -m pip index versions google-genai 2>/dev/null | sed -n 's/^google-genai (\(.*\))$$/\1/p')
endif
GENAI_VENV     ?= .venv-genai-latest
GENAI_STAMP    := $(GENAI_VENV)/.google-genai-$(GENAI_VERSION)

.PHONY: help venv run test test-tools test-real genai-latest lint check bench fixtures example-fixtures real-clis sandbox prometheus balancer browser status-png wheel clean

help:
	@echo "make run       start the gateway on $(HOST):$(PORT) (replays fixtures/ when no CLI is on PATH)"
	@echo "make test      run the test suite"
	@echo "make lint      ruff + mypy --strict + lint-imports (the folders stay layers)"
	@echo "make bench     benchmarks -> bench/results.json, memory-, cache-, warm-, capacity-results.json"
	@echo "make fixtures  re-record fixtures/ from the real CLIs against a fake model API"
	@echo "make wheel     build dist/cli_proxy-*.whl (fixtures included; pipx/uv tool install it)"
	@echo "make example-fixtures  re-record examples/weather-agent's fixtures the same way"

# --no-compile: byte-compiling every installed package took 45 of the install's 92 s (quiet
# 2-vCPU VM, pip cache warm); Python compiles the modules a run imports, once, on first import.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	@$(MAKE) --no-print-directory sandbox || echo "note: bubblewrap not installed: calls run without a PID namespace (docs/security.md)"
	@$(VENV)/bin/cli-proxy doctor $(ARGS) || true
	$(VENV)/bin/cli-proxy serve --host $(HOST) --port $(PORT) $(ARGS)

# Three pytest-xdist workers on this 2-core machine sharing every test (`worksteal`: an idle
# worker takes queued tests from a busy one, so one long test at the end does not leave a core
# idle); a third keeps the cores busy while a test waits on a CLI or a timer (CPU idle 13 % of
# a clean-clone run with two, 3 % with three: docs/performance.md, the test suite's time).
# TEST_WORKERS= runs the suite in one process.
TEST_WORKERS ?= -n 3 --dist worksteal
# The venv and the test tools (the real CLIs, ~15 s from npm; Debian packages) install side by
# side. Without npm or the registry the real-CLI tests skip, the rest still run.
# PYTHONDONTWRITEBYTECODE= (empty: off): this machine's environment sets it, and the venv is
# installed --no-compile, so every pytest worker and every Python subprocess compiled each
# module it imported from source, again: collecting the suite cost 25.4 s of CPU a process
# without .pyc files, 10.3 s with; importing the gateway 2.0 s, 1.4 s (docs/performance.md,
# the test suite's time). Here the first import writes them (into .venv and __pycache__/).
test:
	@$(MAKE) --no-print-directory -j 2 $(STAMP) test-tools
	PYTHONDONTWRITEBYTECODE= CLI_PROXY_REAL_CLI_DIR=$(CURDIR)/$(CLI_DIR)/node_modules/.bin \
		CLI_PROXY_GENAI_PYTHON=$(abspath $(GENAI_VENV))/bin/python \
		$(VENV)/bin/pytest -q -p no:cacheprovider $(TEST_WORKERS)

# One after another: apt-get takes one lock.
test-tools:
	@$(MAKE) --no-print-directory sandbox || echo "note: bubblewrap not installed; bwrap tests will skip (the gateway falls back to the pdeathsig launcher)"
	@$(MAKE) --no-print-directory real-clis || echo "note: real CLIs not installed; realcli tests will skip"
	@$(MAKE) --no-print-directory prometheus || echo "note: prometheus not installed; the real-Prometheus scrape test will skip"
	@$(MAKE) --no-print-directory balancer || echo "note: haproxy not installed; the load-balancer tests (tests/commands/test_deploy.py) will skip"
	@$(MAKE) --no-print-directory browser || echo "note: chromium not installed; the status page's browser test (tests/server/status/test_page_browser.py) will skip"
	@$(MAKE) --no-print-directory genai-latest || echo "note: google-genai $(GENAI_VERSION) not installed; the newest-SDK tests (tests/server/test_generate_content_latest.py, tests/realcli/test_real_cli_genai_latest.py) will skip"

lint: $(STAMP)
	$(VENV)/bin/ruff check cli_proxy tests bench scripts
	$(VENV)/bin/ruff format --check cli_proxy tests bench scripts
	$(VENV)/bin/mypy --strict cli_proxy
	$(VENV)/bin/lint-imports

check: lint test

# docs/status.png: the browser test's screenshot, taken with pytest's base temp at a neutral
# path (the page names each CLI binary it finds: /tmp/cli-proxy-docs/bin/claude), so the
# picture shows nothing of the machine or checkout it was taken on.
status-png: $(STAMP)
	@$(MAKE) --no-print-directory browser
	CLI_PROXY_STATUS_SCREENSHOT=$(CURDIR)/docs/status.png $(VENV)/bin/pytest -q -p no:cacheprovider \
		--basetemp=/tmp/cli-proxy-docs tests/server/status/test_page_browser.py

bench: $(STAMP)
	$(PY) bench/run.py
	$(PY) bench/memory.py
	$(PY) bench/scrape.py
	@$(MAKE) --no-print-directory real-clis sandbox && \
		CLI_PROXY_REAL_CLI_DIR=$(CURDIR)/$(CLI_DIR)/node_modules/.bin $(PY) bench/upstream.py && \
		CLI_PROXY_REAL_CLI_DIR=$(CURDIR)/$(CLI_DIR)/node_modules/.bin $(PY) bench/cache.py && \
		CLI_PROXY_REAL_CLI_DIR=$(CURDIR)/$(CLI_DIR)/node_modules/.bin $(PY) bench/warm.py && \
		CLI_PROXY_REAL_CLI_DIR=$(CURDIR)/$(CLI_DIR)/node_modules/.bin $(PY) bench/capacity.py \
		|| echo "note: real CLIs or bubblewrap missing: the real-CLI benches did not run"

real-clis: $(CLI_DIR)/node_modules/.bin/claude

# A real Prometheus server scrapes the gateway in tests/server/test_prometheus_scrape.py (Debian
# package; installed when missing and we may: root + apt-get).
prometheus:
	@command -v prometheus >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 || \
		  { apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null 2>&1 && \
		    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends prometheus >/dev/null 2>&1; }; }; }
	@command -v prometheus >/dev/null

# bubblewrap (Debian package) gives every CLI call its own PID namespace and a sealed
# filesystem view (docs/security.md). Installed when missing and we may (root + apt-get).
sandbox:
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
		  { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; }; }; }
	@command -v bwrap >/dev/null

# HAProxy (Debian package) for tests/commands/test_deploy.py: replicas behind a real load balancer
# with docs/deploy/haproxy.cfg. Installed when missing and we may (root + apt-get).
HAPROXY_PATH := $(PATH):/usr/sbin:/sbin
balancer:
	@PATH="$(HAPROXY_PATH)" command -v haproxy >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ apt-get install -y -qq haproxy >/dev/null 2>&1 || \
		  { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq haproxy >/dev/null 2>&1; }; }; }
	@PATH="$(HAPROXY_PATH)" command -v haproxy >/dev/null

# Chromium (Debian package) renders GET /status headless in tests/server/status/test_page_browser.py
# (its DOM, and a screenshot: docs/status.png). Installed when missing and we may (root + apt-get).
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends chromium >/dev/null 2>&1 || \
		  { apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null 2>&1 && \
		    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends chromium >/dev/null 2>&1; }; }; }
	@command -v chromium >/dev/null

# The wheel `pipx install` / `uv tool install` take (fixtures included): dist/cli_proxy-*.whl
wheel: $(STAMP)
	$(PY) -m pip wheel --no-deps -q -w dist .

# The google-genai release the newest-SDK tests run (tests/clients/genai_latest.py, a subprocess
# of this venv's python): the SDK and its own dependencies, nothing of the project.
genai-latest: $(GENAI_STAMP)

$(GENAI_STAMP):
	test -n "$(GENAI_VERSION)"
	test -x $(GENAI_VENV)/bin/python || $(PYTHON) -m venv $(GENAI_VENV)
	$(GENAI_VENV)/bin/python -m pip install --quiet --no-compile 'google-genai==$(GENAI_VERSION)' \
		|| { rm -rf $(GENAI_VENV); exit 1; }
	rm -f $(GENAI_VENV)/.google-genai-*
	touch $@

$(CLI_DIR)/node_modules/.bin/claude:
	command -v npm >/dev/null
	npm install --silent --no-audit --no-fund --prefix $(CLI_DIR) \
		$(CLAUDE_NPM)@$(CLAUDE_VERSION) $(GEMINI_NPM)@$(GEMINI_VERSION) \
		$(CODEX_NPM)@$(CODEX_VERSION) $(COPILOT_NPM)@$(COPILOT_VERSION)
	test -x $@ && test -x $(@D)/gemini && test -x $(@D)/codex && test -x $(@D)/copilot

test-real: $(STAMP) real-clis
	CLI_PROXY_REAL_CLI_DIR=$(CLI_DIR)/node_modules/.bin $(VENV)/bin/pytest -q -m realcli

fixtures: $(STAMP) real-clis
	$(PY) scripts/record_fixtures.py --cli-dir $(CLI_DIR)/node_modules/.bin --out fixtures

example-fixtures: $(STAMP) real-clis
	$(PY) scripts/record_example.py --cli-dir $(CLI_DIR)/node_modules/.bin --mode all

clean:
	rm -rf $(VENV) $(GENAI_VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
