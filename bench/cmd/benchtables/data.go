package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// key names one series of samples: a row (the sub-benchmark parameters other than
// impl, such as "pending=1e6"), an implementation and a unit as written in the raw
// output ("ns/op", "p99-ns").
type key struct{ row, impl, unit string }

// data is one results file: every sample of every series, and the GOMAXPROCS values
// seen in benchmark names.
type data struct {
	samples    map[key][]float64
	gomaxprocs []string
	perSeries  int // the most samples of any series
}

// load reads a raw `go test -bench` results file.
func load(path string) (*data, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := &data{samples: map[key][]float64{}}
	r := benchfmt.NewReader(f, path)
	for r.Scan() {
		res, ok := r.Result().(*benchfmt.Result)
		if !ok {
			continue // syntax errors and unit metadata: benchstat reports them
		}
		_, parts := res.Name.Parts()
		var impl string
		var row []string
		for _, p := range parts {
			s := string(p)
			switch {
			case strings.HasPrefix(s, "-"):
				if !slices.Contains(d.gomaxprocs, s[1:]) {
					d.gomaxprocs = append(d.gomaxprocs, s[1:])
				}
			case strings.HasPrefix(s, "/impl="):
				impl = strings.TrimPrefix(s, "/impl=")
			default:
				row = append(row, strings.TrimPrefix(s, "/"))
			}
		}
		for _, v := range res.Values {
			unit, val := v.Unit, v.Value
			if v.OrigUnit != "" {
				unit, val = v.OrigUnit, v.OrigValue
			}
			k := key{strings.Join(row, "/"), impl, unit}
			d.samples[k] = append(d.samples[k], val)
			d.perSeries = max(d.perSeries, len(d.samples[k]))
		}
	}
	return d, r.Err()
}

// median returns the median of a series and whether it has samples.
func (d *data) median(row, impl, unit string) (float64, bool) {
	s := slices.Clone(d.samples[key{row, impl, unit}])
	if len(s) == 0 {
		return 0, false
	}
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

// max returns the largest sample of a series and whether it has samples.
func (d *data) max(row, impl, unit string) (float64, bool) {
	s := d.samples[key{row, impl, unit}]
	if len(s) == 0 {
		return 0, false
	}
	return slices.Max(s), true
}

// rows returns the rows present for unit, in first-seen order of the sorted keys.
func (d *data) rows(unit string) []string {
	var rows []string
	for k := range d.samples {
		if k.unit == unit && !slices.Contains(rows, k.row) {
			rows = append(rows, k.row)
		}
	}
	slices.SortFunc(rows, func(a, b string) int { return compareRows(a, b) })
	return rows
}

// compareRows orders rows by their numeric parameter where they have one (pending=1e3
// before pending=1e6), else by name.
func compareRows(a, b string) int {
	va, errA := paramValue(a)
	vb, errB := paramValue(b)
	if errA == nil && errB == nil && va != vb {
		if va < vb {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

func paramValue(row string) (float64, error) {
	_, v, ok := strings.Cut(row, "=")
	if !ok {
		return 0, fmt.Errorf("no value in %q", row)
	}
	var f float64
	_, err := fmt.Sscanf(v, "%g", &f)
	return f, err
}
