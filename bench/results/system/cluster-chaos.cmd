env CLUSTER_ARGS=-producers 8 -batch 500 -workers 2 CLUSTER_TASKS=600000 make loadgen-cluster
