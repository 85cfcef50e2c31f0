go test -run '^$' -bench '^BenchmarkEngineOneShot$' -count 10 -timeout 0 .
