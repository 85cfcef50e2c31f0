go test -run '^$' -bench '^BenchmarkEngineOneShot$' -count 6 -timeout 0 .
