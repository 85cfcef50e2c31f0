package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strconv"
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
	const workers = 4
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"immediate", nil},
		{"delayed", []string{"-delay", "1s", "-window", "1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runSmall(t, 2000, append([]string{"-target", "beanstalkd", "-beanstalkd-workers", strconv.Itoa(workers)}, tc.args...)...)
			var acked int64
			for _, tk := range res.Throughput {
				acked += tk.Acked
			}
			// Every delete was confirmed before the last run was recorded, except those in
			// flight at the end.
			if acked > 2000 || acked < 2000-workers {
				t.Fatalf("acked %d of 2000", acked)
			}
			var out bytes.Buffer
			res.print(&out)
			if !strings.Contains(out.String(), "never early here by construction") {
				t.Fatalf("summary:\n%s", out.String())
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
