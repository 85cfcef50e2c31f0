package tracingtest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Collector is an OTLP/HTTP trace receiver on a loopback httptest server: it decodes
// each request's protobuf ExportTraceServiceRequest and keeps it, with its path. A body
// that is not one fails the test. Its URL is an exporter's endpoint.
type Collector struct {
	*httptest.Server
	mu    sync.Mutex
	reqs  []*collectortrace.ExportTraceServiceRequest // guarded by mu
	paths map[string]int                              // requests per URL path; guarded by mu
}

// NewCollector starts a Collector, closed at tb's cleanup.
func NewCollector(tb testing.TB) *Collector {
	c := &Collector{paths: map[string]int{}}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
			tb.Errorf("collector: %s %s (%s): %v", r.Method, r.URL.Path, r.Header.Get("Content-Type"), err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.reqs = append(c.reqs, &req)
		c.paths[r.URL.Path]++
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	tb.Cleanup(c.Close)
	return c
}

// Paths returns how many requests arrived at each URL path.
func (c *Collector) Paths() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.paths))
	for p, n := range c.paths {
		out[p] = n
	}
	return out
}

// Received is one span as the collector got it, with its resource's service.name and
// its instrumentation scope.
type Received struct {
	*tracev1.Span
	Service, Scope string
}

// Spans returns every span received so far, by name.
func (c *Collector) Spans() map[string][]Received {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]Received{}
	for _, req := range c.reqs {
		for _, rs := range req.ResourceSpans {
			var service string
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					out[s.Name] = append(out[s.Name], Received{s, service, ss.GetScope().GetName()})
				}
			}
		}
	}
	return out
}
