sh -c CHAOS_DURATION=3m make chaos 2>&1 | grep -E '_test.go:[0-9]+: |^(--- |ok|FAIL|PASS)'
