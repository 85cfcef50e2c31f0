make loadgen-peer
