go test -run '^$' -bench '^BenchmarkEngineDAG$' -count 6 -timeout 0 .
