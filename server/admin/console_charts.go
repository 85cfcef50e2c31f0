package admin

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The console's charts are SVG drawn on the server: a polyline per series over the
// intervals the sampler kept, a y axis from 0 to a round maximum, no script and nothing
// fetched from elsewhere.

// Chart geometry, in SVG user units (the viewBox; the page scales it to its width).
const (
	chartWidth  = 640
	chartHeight = 200
	chartLeft   = 64 // room for the y labels
	chartRight  = 12
	chartTop    = 10
	chartBottom = 26 // room for the x labels
	chartTicks  = 4  // horizontal grid lines above the axis
)

// series is one line of a chart: a name for the legend and a value per interval.
type series struct {
	Name   string
	Color  string // a stroke colour, dark enough for 3:1 against white (WCAG 1.4.11)
	values []float64
	Latest string // the last value, formatted, for the legend and the table
	Points string // the polyline's points, "x,y x,y ..."
}

// gridLine is a horizontal line of the grid and its label.
type gridLine struct {
	Y     int
	Label string
}

// chart is what the chart template draws.
type chart struct {
	ID                  string // unique on the page: the SVG's title and desc ids derive from it
	Title, Desc         string // the SVG's <title> and <desc>: what a screen reader says
	MidX, MidY          int    // the plot's centre, for the "collecting" note
	Width, Height       int
	Left, Right, Bottom int // the plot's edges, for the axes
	Series              []series
	Grid                []gridLine
	From, To            string // the x axis's first and last times
	Empty               bool   // fewer than two samples yet
}

// newChart lays out the series (each with one value per interval, formatted by unit)
// over the intervals' end times.
func newChart(id, title, desc string, ivs []interval, unit func(float64) string, ss ...series) chart {
	c := chart{ID: id, Title: title, Desc: desc, Width: chartWidth, Height: chartHeight,
		Left: chartLeft, Right: chartWidth - chartRight, Bottom: chartHeight - chartBottom, Series: ss}
	c.MidX, c.MidY = (c.Left+c.Right)/2, (chartTop+c.Bottom)/2
	if len(ivs) == 0 {
		c.Empty = true
		return c
	}
	top := 0.0
	for _, s := range ss {
		for _, v := range s.values {
			top = max(top, v)
		}
	}
	top = roundUp(top)
	for i := 0; i <= chartTicks; i++ {
		v := top * float64(i) / chartTicks
		c.Grid = append(c.Grid, gridLine{Y: c.y(v, top), Label: unit(v)})
	}
	c.From, c.To = ivs[0].end.UTC().Format(time.TimeOnly), ivs[len(ivs)-1].end.UTC().Format(time.TimeOnly)
	span := ivs[len(ivs)-1].end.Sub(ivs[0].end)
	for k := range c.Series {
		s := &c.Series[k]
		var b strings.Builder
		for i, v := range s.values {
			x := float64(c.Left+c.Right) / 2 // a single interval sits in the middle
			if span > 0 {
				x = float64(c.Left) + float64(c.Right-c.Left)*float64(ivs[i].end.Sub(ivs[0].end))/float64(span)
			}
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%d", x, c.y(v, top))
		}
		s.Points = b.String()
		if n := len(s.values); n > 0 {
			s.Latest = unit(s.values[n-1])
		}
	}
	return c
}

// y maps v in [0, top] to the plot's height (SVG's y grows downwards).
func (c *chart) y(v, top float64) int {
	h := float64(c.Bottom - chartTop)
	if top <= 0 {
		return c.Bottom
	}
	return c.Bottom - int(math.Round(h*v/top))
}

// roundUp is the smallest of 1, 2 or 5 times a power of ten that is >= v, so that the
// grid's labels are round; 1 for v <= 0, so that an idle chart still has an axis.
func roundUp(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// perSecond formats a rate.
func perSecond(v float64) string {
	if v >= 100 || v == 0 {
		return strconv.FormatFloat(v, 'f', 0, 64) + "/s"
	}
	return strconv.FormatFloat(v, 'g', 3, 64) + "/s"
}

// millis formats a duration given in milliseconds.
func millis(v float64) string {
	if v >= 100 || v == 0 {
		return strconv.FormatFloat(v, 'f', 0, 64) + " ms"
	}
	return strconv.FormatFloat(v, 'g', 3, 64) + " ms"
}

// rateChart and latenessChart are the overview's two charts.
func rateChart(ivs []interval) chart {
	sub, ok, bad := make([]float64, len(ivs)), make([]float64, len(ivs)), make([]float64, len(ivs))
	for i, iv := range ivs {
		sub[i], ok[i], bad[i] = iv.submitted, iv.succeeded, iv.failed
	}
	return newChart("rates", "Task rates", "Tasks submitted, attempts succeeded and attempts failed per second, per sampling interval.",
		ivs, perSecond,
		series{Name: "submitted", Color: "#1f5fa8", values: sub},
		series{Name: "succeeded", Color: "#1b7a3a", values: ok},
		series{Name: "failed", Color: "#b3261e", values: bad})
}

func latenessChart(ivs []interval) chart {
	p, mean := make([]float64, len(ivs)), make([]float64, len(ivs))
	for i, iv := range ivs {
		p[i], mean[i] = ms(iv.lateP99), ms(iv.lateMean)
	}
	return newChart("lateness", "Lateness", "Start minus due time of the attempts started in each sampling interval: the 99th percentile (its histogram bucket's upper bound) and the mean.",
		ivs, millis,
		series{Name: "p99", Color: "#8a4b00", values: p},
		series{Name: "mean", Color: "#5b3a8c", values: mean})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
