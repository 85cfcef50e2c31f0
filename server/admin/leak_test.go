package admin

import (
	"testing"

	"go.uber.org/goleak"
)

// baseline ignores the goroutines running before any test (ants starts its default pool
// at init, through core/task), so tests can check for leaks with
// goleak.VerifyNone(t, baseline).
var baseline goleak.Option

func TestMain(m *testing.M) {
	baseline = goleak.IgnoreCurrent()
	goleak.VerifyTestMain(m, baseline)
}
