// Package leaktest is the goroutine-leak check that tockd's own tests and the tests
// built on tockdtest share (tockd's tests cannot import tockdtest, which imports tockd).
// Only tests import it.
//
// Invariant: with Main as a package's TestMain, the test binary fails if any goroutine
// runs after its tests that did not run before them; VerifyNone checks the same within a
// test. What runs before any test (ants starts its default pool at init, through
// core/task) is the baseline, never a leak.
package leaktest

import (
	"testing"

	"go.uber.org/goleak"
)

// baseline ignores the goroutines that run before any test; set by Main, nil when the
// package's TestMain is another.
var baseline goleak.Option

// Main is a TestMain that takes the baseline VerifyNone compares with and fails the
// test binary if any goroutine outlives its tests:
//
//	func TestMain(m *testing.M) { leaktest.Main(m) }
func Main(m *testing.M) {
	baseline = goleak.IgnoreCurrent()
	goleak.VerifyTestMain(m, baseline)
}

// VerifyNone fails tb if a goroutine runs that did not run before the tests (see Main),
// for a test that checks, once it has stopped everything it started, that nothing of
// it still runs. Without Main it fails tb: there is no baseline to compare with.
func VerifyNone(tb testing.TB) {
	tb.Helper()
	if baseline == nil {
		tb.Fatal("VerifyNone needs Main as the package's TestMain")
		return
	}
	goleak.VerifyNone(tb, baseline)
}
