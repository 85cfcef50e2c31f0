go test -run '^$' -bench '^BenchmarkLateness$' -count 6 -timeout 0 .
