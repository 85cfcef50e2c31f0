go test -run '^$' -bench '^BenchmarkFireBurst$' -count 6 -timeout 0 .
