# Every target creates the virtual environment itself: `make run` and `make test` work on a fresh clone.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp

.PHONY: venv run lint test test-unit bench bench-sched bench-sim soak clean prometheus container-tools image-check

## Debian's prometheus package: promtool for the alert-rule tests (`make test`), the server for
## `make run`. Installed with apt-get when missing and this is a root shell on Debian; otherwise a
## warning says the alert-rule tests will be skipped and `make run` starts no Prometheus.
prometheus:
	@command -v promtool >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  echo "installing Debian's prometheus package (promtool, prometheus) ..." && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1; }; }; } || true
	@command -v promtool >/dev/null 2>&1 || echo "WARNING: promtool not installed (Debian package 'prometheus'): the alert-rule tests will be SKIPPED and make run starts no Prometheus"

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

## The main job on the embedded stack (moto server for SQS, DynamoDB and S3, plus local Redis).
## KEEP=1 leaves the stack up afterwards for the command line, Flower and Prometheus, until Ctrl-C.
run: $(STAMP) prometheus
	$(BIN)/python -m devstack.demo $(if $(KEEP),--keep)

## The gates: ruff (lint), mypy (types), import-linter (the layers contract in pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

## The test suite after the gates (real moto servers, real Redis, real celery worker processes), in
## TEST_PROCESSES parallel pytest processes (pytest-xdist; a file's tests stay in one process, and each
## process has its own moto servers and Redis namespace). TEST_PROCESSES=0 runs it in this process.
## 4 by default, also on 2 cores: the processes spend much of their time waiting on the short test
## clocks (lease TTL, sweeps, injected sleeps and outages), so a fourth one fills idle CPU.
TEST_PROCESSES ?= 4
test: lint prometheus
	$(BIN)/python -m pytest $(if $(filter-out 0,$(TEST_PROCESSES)),-n $(TEST_PROCESSES) --dist loadfile)

## The unit tier alone: pure tests, no server (tests/unit, under a minute).
test-unit: $(STAMP)
	$(BIN)/python -m pytest -m unit tests/unit

## Debian's podman, runc and debootstrap for `make image-check`: installed with apt-get when missing and
## this is a root shell on Debian; otherwise the check says it cannot run here.
container-tools:
	@command -v podman >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  echo "installing Debian's podman, runc and debootstrap ..." && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc debootstrap uidmap >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc debootstrap uidmap >/dev/null 2>&1; }; }; } || true

## The real image (not in `make test`): built with podman on a debootstrap base and run on the local
## stack by devstack/container_check.py (devstack/image_check.py; about 10 minutes the first time on 2
## cores, the base image is kept). Exit 3 when this machine cannot run containers;
## IMAGE_CHECK_ARGS=--skip-unavailable makes that a clear SKIPPED line and exit 0 (.ci/run).
IMAGE_CHECK_ARGS ?=
image-check: $(STAMP) container-tools
	$(BIN)/python -m devstack.image_check $(IMAGE_CHECK_ARGS)

## The engine benchmark (not in `make test`): our engine against pdfimpose and a plain pikepdf page
## copy, as external commands and in-process; tables printed and written to out/bench/ (a few minutes
## on 2 cores). BENCH_QUICK=1 runs only the small inputs; BENCH_UPDATE_DOC=1 also refreshes the
## tables in bench/RESULTS.md.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test,bench]'
	$(BIN)/python -m bench

## The scheduling benchmark (not in `make test`): timer against hand-off on the real local stack, real
## worker processes, a stand-in engine of fixed duration; prints one table, writes it to
## bench/RESULTS-scheduling.md and PNG timelines to out/bench-sched/ (about 105 minutes on 2 cores: each
## scenario on a fresh endpoint and fresh workers),
## then replays each run in the simulator and prints predicted against measured (bench/sim_check.py).
## BENCH_SCHED_ONLY=alone,burst runs a subset; BENCH_SCHED_POLICIES=handoff one policy.
bench-sched: $(STAMP)
	$(BIN)/python -m bench.sched

## The simulator's speed (not in `make test`): four weeks of history, 100 tenants at 10,000 jobs a
## day, simulated under each policy on one core; prints CPU seconds and jobs per second (the budget
## is 10 s). `python -m bench.sim_check` re-compares the saved bench-sched runs with the simulator.
bench-sim: $(STAMP)
	$(BIN)/python -m bench.sim_speed

## The fault soak (not in `make test`): 1,200 jobs over 4 tenants on 2 worker nodes, short clocks,
## 10 random SIGKILLs and every fault class of soak/faults.py twice (SQS/S3 503 and resets, DynamoDB
## 503 and a 35 s stall, Redis down, a SIGSTOPped node, a warm restart); checks the total-queue rule
## (lost, doubled), webhooks, cap violations (lease-event log), infra attempts and the audit
## (about 15 minutes on 2 cores). Numbers in out/soak/summary.json.
soak: $(STAMP)
	$(BIN)/python -m soak

clean:
	rm -rf $(VENV) out .run .pytest_cache .hypothesis
