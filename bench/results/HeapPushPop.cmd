go test -run '^$' -bench '^BenchmarkHeapPushPop$' -count 10 -timeout 0 .
