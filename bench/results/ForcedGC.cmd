go test -run '^$' -bench '^BenchmarkForcedGC$' -count 6 -timeout 0 .
