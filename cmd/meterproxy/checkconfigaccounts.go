package main

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/proxy"
	"github.com/meterproxy/meterproxy/quota"
)

// printAccounts prints, for each of upstream.accounts, a section: where it
// is (the URL's host alone: a URL may carry credentials) and its
// provider, which variable holds its key (by name: the key is never printed), what it serves and
// lends, what each class may take there, then its pools' numbers as the
// one account's are printed. It returns every pool's in-flight bound of
// every account together, which the one transport is sized for. q is
// the quota configuration of upstream's accounts (q.Accounts their quota
// part).
func printAccounts(p func(string, ...any), q quota.Config, upstream proxy.UpstreamConfig) int64 {
	accounts, providers := upstream.Accounts, proxy.AccountProviders(upstream)
	const gap = "\t\t"
	var inFlight int64
	for i, pa := range accounts {
		a := pa.Account
		aq := q.ForAccount(a.Name)
		if i > 0 {
			p(gap)
		}
		p("account %s (upstream.accounts[%d])\t", a.Name, i)
		p("  upstream host\t%s", hostOf(pa.URL))
		p("  provider\t%s", providers[i])
		// The configuration is valid, and that requires the variable set.
		p("  key\tfrom $%s (set; the key is never printed)", pa.APIKeyEnv)
		p("  serves / lends to\t%s / %s", classList(a.Serves), classList(a.LendsTo))
		for _, c := range classify.Classes {
			p("  %s here\t%s", c, partition(q, a, aq, c))
		}
		p(gap)
		p("pool %s (its own)\tfleet\tper replica (÷ %d expected replicas: %s)",
			quota.StateName(a.Name, ""), aq.Account.ExpectedReplicas, perReplicaMeaning(aq))
		printPool(p, aq)
		inFlight += aq.Enforced().InFlight
		for j, m := range aq.Account.Models {
			pq := aq.Pool(m.Name)
			p(gap)
			p("pool %s (upstream.accounts[%d].account.models[%d])\tfleet\tper replica", quota.StateName(a.Name, m.Name), i, j)
			printPool(p, pq)
			inFlight += pq.Enforced().InFlight
		}
	}
	return inFlight
}

// partition says what class c may take at account a, whose Config is aq:
// where a stands in c's order of accounts (those that serve it, then those
// that lend to it), then c's part of a's own pool, fleet-wide.
func partition(q quota.Config, a quota.Account, aq quota.Config, c classify.Class) string {
	order := accountOrder(q, c)
	at := slices.Index(order, a.Name)
	if at < 0 {
		return "not sent here"
	}
	role := "served"
	if !slices.Contains(a.Serves, c) {
		role = "borrows"
	}
	where := fmt.Sprintf("%s (account %d of %d for %s: %s)", role, at+1, len(order), c, strings.Join(order, ", "))
	l, requests := aq.Limits(), aq.Account.RequestLimited()
	if c == classify.Interactive {
		reserve := "no reserve"
		if l.ReserveInFlight > 0 || l.ReserveRPM > 0 {
			reserve = "a reserve bulk never takes: " + amount(l.ReserveRPM, l.ReserveInFlight, requests)
		}
		return fmt.Sprintf("%s; any free capacity, at most %s; %s", where, amount(l.AccountRPM, l.InFlight, requests), reserve)
	}
	if l.Borrow && l.ReserveInFlight == 0 && l.ReserveRPM == 0 {
		return fmt.Sprintf("%s; all of the account, %s (no interactive reserve here)", where, amount(l.AccountRPM, l.InFlight, requests))
	}
	share := "no share of its own"
	if l.BulkInFlight > 0 || l.BulkRPM > 0 {
		share = "its share " + amount(l.BulkRPM, l.BulkInFlight, requests)
	}
	if !l.Borrow {
		return fmt.Sprintf("%s; %s; no borrowing (classes.bulk.borrow is false)", where, share)
	}
	return fmt.Sprintf("%s; %s; borrowing at most %s, never interactive's reserve, held while the account's own headers say it is below it",
		where, share, amount(l.AccountRPM-l.ReserveRPM, l.InFlight-l.ReserveInFlight, requests))
}

// accountOrder is the order in which a request of class c tries the
// accounts (quota's routing): those that serve it, in their order, then
// those that lend to it.
func accountOrder(q quota.Config, c classify.Class) []string {
	var serve, lend []string
	for _, a := range q.Accounts {
		switch {
		case slices.Contains(a.Serves, c):
			serve = append(serve, a.Name)
		case slices.Contains(a.LendsTo, c):
			lend = append(lend, a.Name)
		}
	}
	return append(serve, lend...)
}

// amount is a part of an account, fleet-wide: per second and in flight,
// or in flight alone when the account has no request limit.
func amount(rpm, inFlight int64, requests bool) string {
	if !requests {
		return fmt.Sprintf("%d in flight", inFlight)
	}
	return fmt.Sprintf("%.2f requests/s, %d in flight", rps(rpm), inFlight)
}

// classList is classes as the file lists them, or "none".
func classList(classes []classify.Class) string {
	if len(classes) == 0 {
		return "none"
	}
	names := make([]string, len(classes))
	for i, c := range classes {
		names[i] = c.String()
	}
	return strings.Join(names, ", ")
}

// hostOf is the host of raw, the whole of a URL an operator may see: a
// URL's user information or query may carry a credential.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(not a URL)"
	}
	return u.Host
}
