package tockdtest

import (
	"testing"

	"go.uber.org/goleak"
)

// baseline ignores the goroutines that run before any test (ants starts its default
// pool at init, through core/task); set by Main, nil when the package's TestMain is
// another.
var baseline goleak.Option

// Main is a TestMain that fails the test binary if any goroutine outlives its tests,
// and takes the baseline VerifyNone compares with:
//
//	func TestMain(m *testing.M) { tockdtest.Main(m) }
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
		tb.Fatal("tockdtest.VerifyNone needs tockdtest.Main as the package's TestMain")
		return
	}
	goleak.VerifyNone(tb, baseline)
}
