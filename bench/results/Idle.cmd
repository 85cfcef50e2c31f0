go test -run '^$' -bench '^BenchmarkIdle$' -count 6 -timeout 0 .
