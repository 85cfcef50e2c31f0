go test -run '^$' -bench '^BenchmarkScheduleCancelParallel$' -count 10 -timeout 0 .
