package main

import (
	"testing"

	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// TestMain fails the package's tests if any goroutine (a target's worker, a beanstalkd
// connection, the progress line, a test's tockd) outlives them.
func TestMain(m *testing.M) { tockdtest.Main(m) }
