package main

import (
	"bytes"
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/price"
)

// pricesSection is check-config's account of prices: the table of what
// each entry charges, every fallback applied (a flex row under an entry
// that has flex prices, an audio row under one that prices audio), then a
// warning for each part of the traffic no
// price covers (quota.PriceGaps), or one line when no price is configured.
func pricesSection(q quota.Config) string {
	if len(q.Prices) == 0 {
		return "prices: none configured: every request costs $0 (spend is not metered)\n"
	}
	var rows [][]string
	rows = append(rows, []string{"prices (USD per million tokens)", "input", "cached input", "cache write", "output", "max output (tokens)", "max input (tokens)"})
	for i, p := range q.Prices {
		maxOutput := strconv.FormatInt(p.MaxOutput, 10)
		if p.MaxOutput == 0 {
			maxOutput = fmt.Sprintf("%d (default)", price.DefaultMaxOutput)
		}
		maxInput := strconv.FormatInt(p.MaxInput, 10)
		if p.MaxInput == 0 {
			maxInput = "model family's (default)"
		}
		rows = append(rows, priceRow(fmt.Sprintf("prices[%d] %s", i, strings.Join(p.Match, " ")), p.Effective(""), maxOutput, maxInput))
		if p.AudioInput > 0 || p.AudioOutput > 0 {
			e := p.Effective("")
			in, out := cmp.Or(p.AudioInput, e.Input), cmp.Or(p.AudioOutput, e.Output)
			rows = append(rows, []string{"  audio tokens", usd(in), usd(e.CachedInput), "", usd(out), "", ""})
		}
		if p.Flex != nil {
			rows = append(rows, priceRow("  at service_tier flex", p.Effective(price.TierFlex), "", ""))
		}
		if p.Batch != nil {
			rows = append(rows, priceRow("  in a batch", p.Effective(price.TierBatch), "", ""))
		}
	}
	out := table(rows)
	for i, g := range q.PriceGaps() {
		if i == 0 {
			out += "\n"
		}
		out += "warning: " + g.String() + "\n"
	}
	return out
}

// priceRow is one row of the prices table.
func priceRow(label string, t price.TierPrice, maxOutput, maxInput string) []string {
	return []string{label, usd(t.Input), usd(t.CachedInput), usd(t.CacheWrite), usd(t.Output), maxOutput, maxInput}
}

// usd formats a price with the cents and as many further digits as it
// has: 2.5 is "2.50", 0.625 "0.625".
func usd(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	switch i := strings.IndexByte(s, '.'); {
	case i < 0:
		return s + ".00"
	case len(s)-i == 2:
		return s + "0"
	}
	return s
}

// table aligns rows in columns two spaces apart, as check-config's pool
// table, without trailing spaces.
func table(rows [][]string) string {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		_, _ = fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush() // a bytes.Buffer does not fail
	out := ""
	for line := range strings.Lines(b.String()) {
		out += strings.TrimRight(line, " \n") + "\n"
	}
	return out
}
