go test -run '^$' -bench '^BenchmarkEngineLimits$' -count 6 -timeout 0 .
