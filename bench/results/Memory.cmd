go test -run '^$' -bench '^BenchmarkMemory$' -count 10 -timeout 0 .
