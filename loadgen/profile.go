package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"time"
)

const (
	// maxServerProfileSecs bounds -server-profile-seconds: a run is minutes at most.
	maxServerProfileSecs = 600
	// serverProfileSlack is how long past its seconds the profile's GET may take.
	serverProfileSlack = 30 * time.Second
	// maxServerProfileBytes bounds the body kept: a CPU profile of minutes is a few MB.
	maxServerProfileBytes = 256 << 20
)

// startCPUProfile starts loadgen's CPU profile into path ("" : none) and returns what
// stops it and closes the file.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		return nil
	}, nil
}

// writeMemProfile writes loadgen's heap profile (after a GC, so it is up to date) to path
// ("": none).
func writeMemProfile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-memprofile: %w", err)
	}
	runtime.GC()
	err = pprof.Lookup("allocs").WriteTo(f, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("-memprofile: %w", err)
	}
	return nil
}

// fetchServerProfile GETs http://admin/debug/pprof/profile?seconds=secs (a CPU profile of
// the next secs seconds) and writes the body to path. Only a 200 reply is written; the
// file is not created otherwise. It returns when the profile is written, the GET fails,
// or ctx ends (bounded by secs plus serverProfileSlack).
func fetchServerProfile(ctx context.Context, admin string, secs int, path string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+serverProfileSlack)
	defer cancel()
	u := url.URL{Scheme: "http", Host: admin, Path: "/debug/pprof/profile",
		RawQuery: url.Values{"seconds": {strconv.Itoa(secs)}}.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("server profile: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("server profile: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxServerProfileBytes+1))
	switch {
	case err != nil:
		return fmt.Errorf("server profile: GET %s: %w", u.String(), err)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("server profile: GET %s: %s: %.200s", u.String(), resp.Status, body)
	case len(body) > maxServerProfileBytes:
		return fmt.Errorf("server profile: GET %s: body over %d bytes", u.String(), maxServerProfileBytes)
	case len(body) == 0:
		return fmt.Errorf("server profile: GET %s: empty body", u.String())
	}
	if err := os.WriteFile(path, body, 0o644); err != nil {
		return fmt.Errorf("server profile: %w", err)
	}
	return nil
}
