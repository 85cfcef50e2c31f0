package tockdtest

import (
	"testing"

	"github.com/tock-sched/tock/server/internal/leaktest"
)

// Main is a TestMain that fails the test binary if any goroutine outlives its tests,
// and takes the baseline VerifyNone compares with (what runs before any test: ants
// starts its default pool at init, through core/task):
//
//	func TestMain(m *testing.M) { tockdtest.Main(m) }
func Main(m *testing.M) { leaktest.Main(m) }

// VerifyNone fails tb if a goroutine runs that did not run before the tests (see Main),
// for a test that checks, once it has stopped everything it started, that nothing of
// it still runs. Without Main it fails tb: there is no baseline to compare with.
func VerifyNone(tb testing.TB) {
	tb.Helper()
	leaktest.VerifyNone(tb)
}
