env CLUSTER_CHAOS_EVERY=off CLUSTER_ARGS=-producers 8 -batch 500 make loadgen-cluster
