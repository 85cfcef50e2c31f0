go test -run '^$' -bench '^BenchmarkScheduleCancel$' -count 10 -timeout 0 .
