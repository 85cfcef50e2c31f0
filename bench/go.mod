module github.com/tock-sched/tock/bench

go 1.26.8

require (
	github.com/tock-sched/tock v0.0.0
	golang.org/x/perf v0.0.0-20260908200009-22c9c6c9d4da
)

require (
	github.com/aclements/go-moremath v0.0.0-20210112150236-f10218a38794 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/panjf2000/ants/v2 v2.12.1 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

replace github.com/tock-sched/tock => ../

tool golang.org/x/perf/cmd/benchstat
