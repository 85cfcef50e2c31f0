make loadgen
