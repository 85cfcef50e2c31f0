package main

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestDelayCeil(t *testing.T) {
	s := int64(time.Second)
	for _, c := range []struct {
		ns   int64
		want time.Duration
	}{
		{-s, 0}, {0, 0}, {1, time.Second}, {s - 1, time.Second}, {s, time.Second},
		{s + 1, 2 * time.Second}, {2*s - 1, 2 * time.Second}, {2 * s, 2 * time.Second},
	} {
		if got := delayCeil(c.ns); got != c.want {
			t.Errorf("delayCeil(%d) = %v, want %v", c.ns, got, c.want)
		}
	}
}

// needBeanstalkd skips the test when the beanstalkd binary is not on PATH.
func needBeanstalkd(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("beanstalkd"); err != nil {
		t.Skip("beanstalkd is not on PATH (Debian, Ubuntu: apt-get install beanstalkd); skipping the beanstalkd target test")
	}
}

// TestBeanstalkdTargetSmall runs 2,000 immediate tasks, then 2,000 due over 1-2 s, through
// a beanstalkd that loadgen starts, and checks that every task ran once, none early.
func TestBeanstalkdTargetSmall(t *testing.T) {
	needBeanstalkd(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"immediate", nil},
		{"delayed", []string{"-delay", "1s", "-window", "1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-target", "beanstalkd", "-tasks", "2000", "-beanstalkd-workers", "4", "-payload", "64"}, tc.args...)
			// Generous: 2,000 jobs take well under a second here; the machine may be loaded.
			c, res, summary := runClean(t, 60*time.Second, args...)
			var acked int64
			for _, tk := range res.Throughput {
				acked += tk.Acked
			}
			// Every delete was confirmed before the last run was recorded, except those in
			// flight at the end.
			if acked > 2000 || acked < 2000-int64(c.bsWorkers) {
				t.Fatalf("acked %d of 2000", acked)
			}
			if !strings.Contains(summary, "never early here by construction") {
				t.Fatalf("summary:\n%s", summary)
			}
		})
	}
}

func TestBeanstalkdMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	c, err := parseFlags([]string{"-target", "beanstalkd", "-tasks", "10"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(context.Background(), c); !errors.Is(err, errNoBeanstalkd) {
		t.Fatalf("err %v, want %v", err, errNoBeanstalkd)
	}
	if !strings.Contains(errNoBeanstalkd.Error(), "apt-get install beanstalkd") {
		t.Fatal("the error does not say how to install beanstalkd")
	}
}
