go test -run '^$' -bench '^BenchmarkFireWindow$' -count 6 -timeout 0 .
