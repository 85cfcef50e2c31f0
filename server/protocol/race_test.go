//go:build race

package protocol

// raceEnabled: the race detector makes sync.Pool drop items at random, so allocation
// counts that rely on the encoder and decoder pools are not pinned under -race.
const raceEnabled = true
