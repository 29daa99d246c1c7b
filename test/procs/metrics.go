package procs

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of a meterproxy's /metrics.
type Metrics map[string]*dto.MetricFamily

// Scrape reads /metrics from the admin listener at adminURL.
func Scrape(ctx context.Context, adminURL string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, adminURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("procs: scrape: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(res.Body)
	if err = errors.Join(err, res.Body.Close()); err != nil {
		return nil, fmt.Errorf("procs: scrape: %w", err)
	}
	return Metrics(mfs), nil
}

// Sum adds the values of every series of name whose labels include labels:
// counter and gauge values, histogram sample counts.
func (m Metrics) Sum(name string, labels map[string]string) float64 {
	var total float64
	for _, s := range m[name].GetMetric() {
		if !hasLabels(s, labels) {
			continue
		}
		switch {
		case s.Counter != nil:
			total += s.GetCounter().GetValue()
		case s.Gauge != nil:
			total += s.GetGauge().GetValue()
		case s.Histogram != nil:
			total += float64(s.GetHistogram().GetSampleCount())
		}
	}
	return total
}

// SumWhere is Sum over the series of name whose labels keep accepts.
func (m Metrics) SumWhere(name string, keep func(labels map[string]string) bool) float64 {
	var total float64
	for _, s := range m[name].GetMetric() {
		labels := make(map[string]string, len(s.GetLabel()))
		for _, lp := range s.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		if keep(labels) {
			total += Metrics{name: &dto.MetricFamily{Metric: []*dto.Metric{s}}}.Sum(name, nil)
		}
	}
	return total
}

func hasLabels(s *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, lp := range s.GetLabel() {
		if v, ok := labels[lp.GetName()]; ok && v == lp.GetValue() {
			n++
		}
	}
	return n == len(labels)
}
