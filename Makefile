# tock: make run (the main job), make test (what CI runs), make bench (the tables), make demo.
SHELL := /bin/bash
GO ?= go
GOFLAGS_TEST ?= -race -count=1
BENCH_COUNT ?= 10

.PHONY: run loadgen loadgen-peer loadgen-dag demo test lint fuzz bench bench-tables profiles clean

## run: tockd with an embedded etcd in a temporary directory on 127.0.0.1:17450, driven by
## loadgen (100,000 ephemeral tasks, then 2,000 durable ones), every task counted; tockd is
## stopped and the directory removed even if a run fails (loadgen/make-run.sh).
run:
	GO=$(GO) ./loadgen/make-run.sh run

## loadgen: 1,000,000 one-shot tasks through the in-process engine (loadgen -target core),
## then the same through a single-node tockd with an embedded etcd (ephemeral), every task
## counted (LOADGEN_TASKS to change the count).
loadgen:
	GO=$(GO) ./loadgen/make-run.sh loadgen

## loadgen-peer: tockd against beanstalkd, the same workloads in one loadgen invocation
## each (-target server,beanstalkd): 200,000 immediate tasks, then 20,000 due over 1-6 s;
## each summary and a ratio line. Needs beanstalkd on PATH (it installs nothing: on
## Debian, apt-get install beanstalkd); loadgen starts it on a free port and kills it.
loadgen-peer:
	GO=$(GO) ./loadgen/make-run.sh peer

## loadgen-dag: workflows of 100 tasks (a root, 98 children, a sink: -dag fan:100) under
## one concurrency key of limit 64, 100,000 tasks through the in-process engine and then
## a single-node tockd in one loadgen invocation; every task counted, and every child's
## start checked against its parents' ends (DAG_TASKS, DAG_ARGS to change them).
loadgen-dag:
	GO=$(GO) ./loadgen/make-run.sh dag

## demo: the in-process timer core demo: a million timers due within a second, every one counted.
demo:
	$(GO) run ./core/cmd/tockdemo -timers 1000000 -window 1s

## test: formatting, vet, the race-enabled unit and integration tests, and a one-pass smoke
## run of every benchmark so that the benchmark code cannot rot.
test: lint
	$(GO) test $(GOFLAGS_TEST) ./...
	$(MAKE) -C bench test

## console-test: the admin port's web console in a real browser (not part of test): installs
## Debian's chromium if it is missing (apt-get; run as root), starts a tockd with tasks in
## every state, a worker and the admin token on, logs in through the form, loads each page
## headless over the DevTools protocol, checks its text, requeues a dead letter and pauses
## a type by clicking, and saves a screenshot of each page in CONSOLE_SHOTS (git-ignored).
CONSOLE_SHOTS ?= $(CURDIR)/server/admin/screenshots
.PHONY: console-test
console-test:
	@command -v chromium >/dev/null || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }
	TOCK_CONSOLE_SHOTS=$(CONSOLE_SHOTS) $(GO) test -race -tags browser -count=1 -v -run 'TestConsoleInBrowser' ./server/admin

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

## fuzz: each fuzz target for a bounded time (FUZZTIME per target).
FUZZTIME ?= 60s
fuzz:
	$(GO) test ./core/quadheap -run '^$$' -fuzz FuzzOps -fuzztime $(FUZZTIME)
	$(GO) test ./core/task -run '^$$' -fuzz FuzzCron -fuzztime $(FUZZTIME)
	$(GO) test ./server/protocol -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME)
	$(GO) test ./server/protocol -run '^$$' -fuzz FuzzTaskValidation -fuzztime $(FUZZTIME)

## bench: every comparison, BENCH_COUNT times, into bench/results/, then the tables.
bench:
	$(MAKE) -C bench all COUNT=$(BENCH_COUNT)

## profiles: the CPU and allocation profiles behind the tuning, into profiles/.
profiles:
	$(MAKE) -C bench profiles

clean:
	rm -rf bench/results/tmp

## cluster: 3 etcd members and 3 tockd nodes on 127.0.0.1 (tockd clients 17460-17462,
## admin 17470-17472; etcd 23790-23792), run dir $${TMPDIR:-/tmp}/tock-cluster (logs,
## data, pids); refuses while one runs. cluster-down stops it and removes the run dir.
.PHONY: cluster cluster-down cluster-status
cluster:
	GO=$(GO) ./server/internal/clustertest/cluster.sh up

cluster-down:
	GO=$(GO) ./server/internal/clustertest/cluster.sh down

cluster-status:
	./server/internal/clustertest/cluster.sh status

## chaos: the long failover runs against separate tockd processes and a real 3-member etcd:
## first the history checker (TestChaosHistory) for CHAOS_DURATION of seeded faults (the
## leader killed, stalled past its TTL, cut from etcd, forced to resign and elected again;
## an etcd member stopped), its seed printed (CHAOS_SEED=N replays it), the whole history
## written to CHAOS_OUT; then the leader SIGKILLed, and SIGSTOPped, under durable load
## CHAOS_ROUNDS times, and SIGKILLed mid-way through durable workflows (DAGs) as many;
## 10,000 tasks under a concurrency key of limit 3 across a SIGKILL and a SIGSTOP of the
## leader (make test runs one round of each, 1,000 such tasks, and the history checker's
## short form), every acknowledged task counted. Both
## parts run even when the first fails; the target fails if either did.
CHAOS_ROUNDS ?= 5
CHAOS_DURATION ?= 5m
CHAOS_SEED ?=
CHAOS_OUT ?= $(or $(TMPDIR),/tmp)/tock-chaos
.PHONY: chaos
chaos:
	@status=0; \
	TOCK_CHAOS_DURATION=$(CHAOS_DURATION) TOCK_CHAOS_SEED=$(CHAOS_SEED) TOCK_CHAOS_OUT=$(CHAOS_OUT) \
		$(GO) test -race -count=1 -v -timeout 0 -run 'TestChaosHistory' ./server/internal/clustertest || status=1; \
	TOCK_FAILOVER_ROUNDS=$(CHAOS_ROUNDS) $(GO) test -race -count=1 -v -run 'TestDurableFailover|TestFailoverAfterLeaderKill|TestLeaderCutOffFromEtcd|TestLeaderSurvivesEtcdMemberStop|TestExclusiveNeverOverlaps|TestDurableWorkflowSurvivesLeaderKill|TestConcurrencyLimitHoldsAcrossFailover' ./server/internal/clustertest || status=1; \
	exit $$status

## loadgen-cluster: against a running `make cluster` (fails if none): CLUSTER_TASKS
## (200,000) durable tasks through the 3 tockd nodes, the leader SIGKILLed every
## CLUSTER_CHAOS_EVERY (10s; off for none) and revived (cluster.sh restart); prints the
## summary with the durable submits/s, each failover time, lost and duplicates.
.PHONY: loadgen-cluster
loadgen-cluster:
	GO=$(GO) ./loadgen/cluster-run.sh
