go run ./loadgen -target core -tasks 1000000
