package quota

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/store"
)

// Routing a request between accounts (accounts.go): past its caller's
// gates, it waits at the first account of its candidates that is not busy
// (nothing of its class waiting there, not held, not blocked this second)
// — the accounts that serve its class first, in order, then those that
// lend to it — and when every one is busy, at all of them at once: the
// first to grant it wins, and the others let it go (a grant that raced
// the let-go is handed on to the next waiter there, limiter.handBack: the
// store counted it in its window). So a request goes to
// its own account while that has room, borrows the moment it has none,
// and never waits at one account while another it may use has room.

// route is one account a request may be admitted at: its pool there and
// what it is charged there.
type route struct {
	account, pool string
	l             *limiter
	tokens        int64
}

// routing is what Reconfigure derives from a configuration for routing:
// each account's Config (Config.ForAccount) and each class's candidates.
type routing struct {
	accounts   map[string]Config
	candidates [classify.NumClasses][]string
}

// newRouting derives cfg's routing.
func newRouting(cfg Config) *routing {
	r := &routing{accounts: map[string]Config{}}
	for _, name := range accountNames(cfg) {
		r.accounts[name] = cfg.ForAccount(name)
	}
	for _, c := range classify.Classes {
		r.candidates[c] = candidates(cfg, c)
	}
	return r
}

// routes are the accounts req may be admitted at, in order of preference,
// each with the pool req's model draws on there and its charge there:
// its class's candidates among req.Accounts. An account where req's
// charge is more than one request may be charged is left out; when that
// leaves none, the first such refusal is the error, and ErrNoAccount when
// no candidate is among req.Accounts.
// They are appended to out (a caller's array: no allocation per request
// for a few accounts).
func (a *Admitter) routes(rt *routing, req Request, out []route) ([]route, error) {
	cands := rt.candidates[req.Class]
	var refused error
	for _, account := range cands {
		if req.Pinned && account != req.Account || !among(req.Accounts, account) {
			continue
		}
		ac := rt.accounts[account]
		r := req
		r.pool = ac.PoolFor(req.Model)
		tokens, err := charge(ac, r)
		if err != nil {
			refused = cmp.Or(refused, err)
			continue
		}
		out = append(out, route{account: account, pool: r.pool, l: a.pool(store.PoolID(account, r.pool)), tokens: tokens})
	}
	if len(out) == 0 {
		return nil, cmp.Or(refused, ErrNoAccount)
	}
	return out, nil
}

// among reports whether account is one of accounts, every account for
// nil (Request.Accounts).
func among(accounts []string, account string) bool {
	return accounts == nil || slices.Contains(accounts, account)
}

// maxRoutes is how many routes a request's array holds before they
// spill to the heap: more accounts than any shape needs.
const maxRoutes = 4

// admit admits req at r.
func (r route) admit(ctx context.Context, req Request) (*Lease, error) {
	req.pool, req.Tokens = r.pool, r.tokens
	lease, err := r.l.Admit(ctx, req)
	if err != nil {
		return nil, err
	}
	lease.account, lease.pool = r.account, r.pool
	return lease, nil
}

// errLetGo ends a request's wait at an account after another granted it.
var errLetGo = errors.New("quota: admitted at another account")

// admitRouted admits req at one of routes: at the first that is not
// busy, or when all are, at whichever grants first. A request sent to a
// route that looked free but does not grant it within routeGrace (busy is
// a guess: the second's allowance or the slots went to others meanwhile)
// waits at every other route too from then on, and takes the first grant.
func admitRouted(ctx context.Context, routes []route, req Request) (*Lease, error) {
	if len(routes) == 1 {
		return routes[0].admit(ctx, req)
	}
	sec := time.Now().Unix()
	for i, r := range routes {
		if !r.l.busy(req.Class, sec) {
			return admitFirst(ctx, routes, req, i)
		}
	}
	return admitFirst(ctx, routes, req, -1)
}

// routeGrace is how long a request waits at the route that looked free
// before it waits at the others too: a route with room grants within a
// store call (a Redis round trip, milliseconds even on a loaded machine);
// past this it is waiting for a later second or a freed slot.
const routeGrace = 50 * time.Millisecond

// admitFirst waits for req at every route at once and keeps the first
// grant; the other waits are let go. With first ≥ 0 it waits at
// routes[first] alone for routeGrace before it starts at the others. When
// none grants, the error is the most preferred route's.
func admitFirst(ctx context.Context, routes []route, req Request, first int) (*Lease, error) {
	ctx, letGo := context.WithCancelCause(ctx)
	defer letGo(nil)
	type answer struct {
		i     int
		lease *Lease
		err   error
	}
	answers := make(chan answer, len(routes))
	for i, r := range routes {
		go func() {
			if first >= 0 && i != first {
				t := time.NewTimer(routeGrace)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					answers <- answer{i, nil, context.Cause(ctx)}
					return
				}
			}
			lease, err := r.admit(ctx, req)
			answers <- answer{i, lease, err}
		}()
	}
	var won *Lease
	errs := make([]error, len(routes))
	for range routes {
		a := <-answers
		switch {
		case a.err != nil:
			errs[a.i] = a.err
		case won == nil:
			won = a.lease
			letGo(errLetGo)
		default: // granted before it heard of the first: it never goes, its grant goes on
			routes[a.i].l.handBack(a.lease)
		}
	}
	if won != nil {
		return won, nil
	}
	if first >= 0 && errs[first] != nil {
		return nil, errs[first]
	}
	return nil, cmp.Or(errs...)
}

// busy reports whether a request of class c would wait at l now (in
// window sec), as far as l knows without asking the store: others of its
// class wait there, bulk is held on the upstream's word (as the store
// last said, or as a response said since), the store's last answer found
// c blocked this second, or the partition rule the store grants by
// (Limits.room) leaves c no request in the window, no slot in flight or,
// where tokens are enforced, no tokens — bulk borrowing only while no
// interactive request is starved (starved). It is a preference: wrong
// one way, a request waits at l for what l lacks (a second, or a slot);
// wrong the other, it waits at every account it may go to and takes the
// first.
func (l *limiter) busy(c classify.Class, sec int64) bool {
	held := c == classify.Bulk && (l.UpstreamHold() > 0 || l.loop.pending.holds(time.Now()))
	if held || l.Queued(c) > 0 || l.loop.last.blockedIn(c, sec) {
		return true
	}
	lim := l.limits.Load().enforced
	var used, tokens, inFlight store.PerClass
	if w := l.Window(); w.Sec == sec {
		used, tokens = w.Requests, w.Tokens
	}
	for _, cl := range classify.Classes {
		inFlight[cl] = l.FleetInFlight(cl)
	}
	wroom, froom, troom := lim.Room(c, sec, lim.Borrow && !l.starved(sec), used, inFlight, tokens)
	return wroom <= 0 || froom <= 0 || lim.AccountTPM > 0 && troom <= 0
}

// starved reports whether an interactive request is starved at l, as far
// as l knows: one waits here, or the store's last answer found
// interactive short in window sec or the one before — what stops bulk
// borrowing fleet-wide (store.GrantAll's borrow, the starved set of
// quota/store's take.lua) until interactive is granted all it asks.
func (l *limiter) starved(sec int64) bool {
	return l.Queued(classify.Interactive) > 0 || l.loop.last.blockedIn(classify.Interactive, sec) ||
		l.loop.last.blockedIn(classify.Interactive, sec-1)
}

// HeaderReserve is the fraction of a limit the provider's own rate-limit
// headers must report left at account (as upstream.accounts names it; ""
// the one account) for bulk to go there; below it the proxy holds bulk
// (Observe). It is the interactive reserve the account keeps
// (Account.classesFor): classes.interactive.reserve where interactive is
// served, 0 where bulk is served alone or the account only lends — there
// is no interactive to keep it for, and bulk may take all of it. An
// account a reload removed keeps none.
func (a *Admitter) HeaderReserve(account string) float64 {
	return a.routing.Load().accounts[account].Classes.Interactive.Reserve
}

// errNoOtherAccount refuses to move a request (Readmit) when its class
// may go to no account it has not tried.
var errNoOtherAccount = errors.New("quota: no other account the request may go to")

// Others reports whether a request of class c may go to an account other
// than those in tried, among accounts (Request.Accounts): whether Readmit
// has anywhere to look.
func (a *Admitter) Others(c classify.Class, accounts, tried []string) bool {
	for _, account := range a.routing.Load().candidates[c] {
		if among(accounts, account) && !slices.Contains(tried, account) {
			return true
		}
	}
	return false
}

// Readmit moves the request old was admitted for, refused by old's
// account (a 429 of its own), to another account its class may go to that
// is not in tried, routed as Admit routes (admitRouted) and waiting there
// within what is left of old's max_wait. Its pass through the caller's
// gates (its cap's place, its budgets' reservation) moves to the new
// lease: it is the same request, not a second one. old's slot is given
// back and its charge returned (the refusal cost nothing). On an error
// old is left as it was: errNoOtherAccount, a *gate.RefusedError when max_wait
// passes, or the context's error.
func (a *Admitter) Readmit(ctx context.Context, old *Lease, req Request, tried []string) (*Lease, error) {
	var buf [maxRoutes]route
	routes, err := a.routes(a.routing.Load(), req, buf[:0])
	if err != nil {
		return nil, err
	}
	routes = slices.DeleteFunc(routes, func(r route) bool { return slices.Contains(tried, r.account) })
	if len(routes) == 0 {
		return nil, errNoOtherAccount
	}
	req.until = old.until
	if !req.until.After(time.Now()) {
		return nil, &gate.RefusedError{Class: req.Class, Reason: gate.ErrWaitTimeout, RetryAfter: time.Second}
	}
	lease, err := admitRouted(ctx, routes, req)
	if err != nil {
		return nil, err
	}
	lease.gate, old.gate = old.gate, gate.Pass{}
	lease.until, lease.price, lease.worst = old.until, old.price, old.worst
	old.cancel()
	return lease, nil
}
