env CLUSTER_ARGS=-producers 8 -batch 500 make loadgen-cluster
