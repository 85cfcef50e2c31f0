go test -run '^$' -bench '^BenchmarkReset$' -count 10 -timeout 0 .
