module github.com/tock-sched/tock

go 1.26.8

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/panjf2000/ants/v2 v2.12.1
	github.com/robfig/cron/v3 v3.0.1
	github.com/vmihailenco/msgpack/v5 v5.4.1
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	golang.org/x/sync v0.11.0 // indirect
)
