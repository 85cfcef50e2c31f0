package admin

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

func TestMain(m *testing.M) { tockdtest.Main(m) }

// fixedStats is a snapshot with every field distinct and non-zero, and two non-empty
// histograms with different bounds, so a field wired to the wrong metric shows.
func fixedStats() tockd.Stats {
	return tockd.Stats{
		Engine: task.Stats{
			Submitted: 1001, Started: 1002, Succeeded: 1003, Failed: 1004, Retried: 1005,
			Dead: 1006, Cancelled: 1007, TimedOut: 1008, Panics: 1009, Misfired: 1010,
			LateResults: 1011, DLQEvicted: 1012, LimitWaits: 1013, WaitingOnLimit: 2006,
			Tasks: 2001, Queued: 2002, Running: 2003, HungWorkers: 2004, DeadLetters: 2005,
			Lateness: task.Histogram{
				Bounds: []time.Duration{50 * time.Microsecond, time.Millisecond, 250 * time.Millisecond, time.Second},
				Counts: []uint64{3, 7, 9, 12},
				Count:  13,
				Sum:    2500 * time.Millisecond,
			},
			Duration: task.Histogram{
				Bounds: []time.Duration{10 * time.Millisecond, time.Minute},
				Counts: []uint64{4, 5},
				Count:  6,
				Sum:    90 * time.Second,
			},
		},
		Connections: 3001, Workers: 3002, Waiting: 3003, PendingDeletes: 3010, QueuedReplyBytes: 3011,
		Fired: 3004, Acked: 3005, Nacked: 3006, Redelivered: 3007, ReplyStalls: 3012, Carried: 3013, Adopted: 3016,
		CarryRefused: [tockd.NumCarryRefusals]uint64{3101, 3102, 3103, 3104, 3105, 3106, 3107}, DurableCommits: 3014, FiresFrames: 3015,
		IsLeader: true, Epoch: 3008, LeaderChanges: 3009,
		Partitions: fixedMap(), Node: "node-a",
		ConfigChanges: map[string]uint64{"max_waiting_runs": 3201, "rate_limit/email": 3202},
	}
}

// start serves opts on 127.0.0.1:0 and returns the server and its base URL. Cleanup
// shuts it down and checks that Serve returned ErrServerClosed.
func start(t *testing.T, opts Options) (*Server, string) {
	t.Helper()
	s, err := New(WithOptions(opts))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	base, served := serve(t, s)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), tockdtest.Limit)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := tockdtest.Receive(t, served, "Serve's return after Shutdown"); !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return s, base
}

// serve runs s.Serve on a fresh 127.0.0.1 listener and returns the base URL and what
// Serve returns, once it does.
func serve(t *testing.T, s *Server) (string, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	return "http://" + ln.Addr().String(), served
}

// client makes one request per connection, so no idle keep-alive connection (and its
// goroutines) outlives a test.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: tockdtest.Limit}

// get fetches url and returns the status and body.
func get(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", url, err)
	}
	return resp.StatusCode, string(body), resp.Header
}

// scrape GETs base+"/metrics" and parses the text exposition.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body, _ := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: status %d: %s", code, body)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics: parsing: %v\n%s", err, body)
	}
	return fams
}

// fixedMap is fixedStats' partition map: 16 partitions, node-a owning 6 (0..5, held at
// epochs 4000..4005), node-b 10 (6..15, held but for 14 and 15).
func fixedMap() tockd.PartitionMap {
	m := tockd.PartitionMap{Count: 16, Rev: 3015, Nodes: []tockd.PartitionNode{
		{Name: "node-a", Addr: "127.0.0.1:1", Owned: 6, Live: true}, {Name: "node-b", Addr: "127.0.0.1:2", Owned: 10, Live: true}}}
	for p := range 16 {
		owner, held := 0, p < 14
		if p >= 6 {
			owner = 1
		}
		epoch := int64(0)
		if held {
			epoch = 4000 + int64(p)
		}
		m.Owners, m.Held, m.Epochs = append(m.Owners, owner), append(m.Held, held), append(m.Epochs, epoch)
	}
	return m
}
