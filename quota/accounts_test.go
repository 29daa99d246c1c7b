package quota

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/store"
)

// twoAccounts is a configuration of two accounts: chat serves interactive
// and lends to bulk, batch serves bulk. Each bounds what it has in flight,
// so what goes where is counted in slots, whatever the clock: chat 10 (a
// reserve of 3 bulk never takes), batch 1.
func twoAccounts() Config {
	cfg := DefaultConfig()
	cfg.Classes.Interactive = interactiveConfig{Share: 0.8, Reserve: 0.3, MaxWait: 10 * time.Second, MaxQueue: 50}
	cfg.Classes.Bulk = BulkConfig{Share: 0.2, Borrow: true, MaxWait: 10 * time.Second, MaxQueue: 50}
	cfg.Accounts = []Account{
		{Name: "chat", Account: AccountConfig{RequestsPerMinute: 60000, MaxInFlight: 10},
			Serves: []classify.Class{classify.Interactive}, LendsTo: []classify.Class{classify.Bulk}},
		{Name: "batch", Account: AccountConfig{RequestsPerMinute: 60000, MaxInFlight: 1},
			Serves: []classify.Class{classify.Bulk}},
	}
	return cfg
}

// TestAccountsRouteAndBorrow: each class goes to the account that serves
// it; bulk borrows from the lender only when its own has nothing left, and
// never into the lender's interactive reserve; a borrower does not delay
// the lender's interactive; a waiting bulk request goes to whichever
// account frees a slot first.
func TestAccountsRouteAndBorrow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := twoAccounts()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		a := runAdmitter(t, cfg, nil)
		admit := func(c classify.Class) *Lease {
			t.Helper()
			lease, err := a.Admit(t.Context(), Request{Class: c})
			if err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			return lease
		}
		first := admit(classify.Bulk)
		if first.Account() != "batch" {
			t.Fatalf("the first bulk request went to %q, want its own account, batch", first.Account())
		}
		var borrowed []*Lease
		for range 7 { // chat's 10 less its reserve of 3
			l := admit(classify.Bulk)
			if l.Account() != "chat" {
				t.Fatalf("with batch full, bulk went to %q, want to borrow chat", l.Account())
			}
			borrowed = append(borrowed, l)
		}
		// Chat's reserve is interactive's: a bulk request now waits.
		got := make(chan *Lease, 1)
		go func() {
			lease, err := a.Admit(t.Context(), Request{Class: classify.Bulk})
			if err != nil {
				t.Errorf("waiting bulk: %v", err)
			}
			got <- lease
		}()
		synctest.Wait()
		select {
		case l := <-got:
			t.Fatalf("bulk took chat's interactive reserve (admitted at %q)", l.Account())
		default:
		}
		// Interactive at chat goes at once, beside the borrowers.
		for range 3 {
			if l := admit(classify.Interactive); l.Account() != "chat" {
				t.Fatalf("interactive went to %q, want chat", l.Account())
			}
		}
		// A slot freed at batch admits the waiting bulk request there.
		first.Release()
		synctest.Wait()
		select {
		case l := <-got:
			if l.Account() != "batch" {
				t.Fatalf("the waiting bulk request went to %q, want batch, where the slot was freed", l.Account())
			}
			l.Release()
		default:
			t.Fatal("the waiting bulk request was not admitted when batch freed a slot")
		}
		for _, l := range borrowed {
			l.Release()
		}
		st := a.State()
		for _, name := range []string{"chat/default", "batch/default"} {
			if _, ok := st.Pools[name]; !ok {
				t.Errorf("/admin/state has no pool %s: %v", name, st.Pools)
			}
		}
		if len(st.Accounts) != 2 || st.Accounts[0].Name != "chat" || st.Accounts[0].LendsTo[0] != classify.Bulk || st.Accounts[1].Serves[0] != classify.Bulk {
			t.Errorf("/admin/state's accounts: %+v", st.Accounts)
		}
	})
}

// TestAccountsHeldLenderLendsNothing: while the lender's own headers say
// it is below its reserve (Observe's hold), bulk does not borrow from it,
// and waits for its own account instead.
func TestAccountsHeldLenderLendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := runAdmitter(t, twoAccounts(), nil)
		a.Observe("chat", store.AccountPool, time.Now(), time.Minute, 0)
		own, err := a.Admit(t.Context(), Request{Class: classify.Bulk})
		if err != nil || own.Account() != "batch" {
			t.Fatalf("bulk: %v at %q, want batch", err, own.Account())
		}
		got := make(chan error, 1)
		go func() {
			lease, err := a.Admit(t.Context(), Request{Class: classify.Bulk})
			if err == nil && lease.Account() != "batch" {
				err = errors.New("borrowed from " + lease.Account() + " while it was held")
			}
			got <- err
		}()
		time.Sleep(5 * time.Second) // fake time: chat stays held, batch full
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("bulk was answered while chat was held and batch full: %v", err)
		default:
		}
		own.Release()
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	})
}

// TestAccountsRedisKeys: each account's pools are under a hash tag of
// their own; the one account's keep the tags they had before accounts.
func TestAccountsRedisKeys(t *testing.T) {
	for id, want := range map[string]string{
		"":                    "{mp}",
		"gpt-4o":              "{mp:pool:gpt-4o}",
		"chat/":               "{mp:acct:chat}",
		"chat/gpt-4o":         "{mp:acct:chat:pool:gpt-4o}",
		store.PoolID("b", ""): "{mp:acct:b}",
	} {
		if got := store.PoolTag("mp", id); got != want {
			t.Errorf("poolTag(%q) = %q, want %q", id, got, want)
		}
	}
}

// TestAccountsValidate: upstream.accounts' problems, each by key.
func TestAccountsValidate(t *testing.T) {
	I, B := classify.Interactive, classify.Bulk
	for name, tc := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"duplicate name": {func(c *Config) { c.Accounts[1].Name = "chat" }, "upstream.accounts[1].name"},
		"bad name":       {func(c *Config) { c.Accounts[0].Name = "Chat/1" }, "upstream.accounts[0].name"},
		"default":        {func(c *Config) { c.Accounts[0].Name = "default" }, "upstream.accounts[0].name"},
		"none":           {func(c *Config) { c.Accounts[1].Name = "none" }, "upstream.accounts[1].name"},
		"serves and lends": {func(c *Config) { c.Accounts[0].LendsTo = []classify.Class{I} },
			"upstream.accounts[0].lends_to"},
		"bulk account lends to interactive": {func(c *Config) { c.Accounts[1].LendsTo = []classify.Class{I} },
			"upstream.accounts[1].lends_to"},
		"nobody serves bulk": {func(c *Config) { c.Accounts[1].Serves = []classify.Class{I}; c.Accounts[0].LendsTo = nil },
			"no account serves or lends to bulk"},
		"unused": {func(c *Config) { c.Accounts[1].Serves = nil }, "upstream.accounts[1].serves"},
		"limits": {func(c *Config) { c.Accounts[1].Account.MaxInFlight = 0 }, "upstream.accounts[1].account.max_in_flight"},
		"models": {func(c *Config) {
			c.Accounts[0].Account.Models = []modelPool{{Name: "m", Match: []string{"m*"}, RequestsPerMinute: 0, MaxInFlight: 1}}
		}, "upstream.accounts[0].account.models[0].requests_per_minute"},
		"twice": {func(c *Config) { c.Accounts[1].Serves = []classify.Class{B, B} }, "upstream.accounts[1]: names a class twice"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := twoAccounts()
			tc.edit(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want a problem naming %q", err, tc.want)
			}
		})
	}
}

// TestAccountsChargeTooLargeNamesTheAccount: a charge above what one
// request may be charged at every account it may go to is refused naming
// the account's key.
func TestAccountsChargeTooLargeNamesTheAccount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := twoAccounts()
		cfg.Accounts[0].Account.TokensPerMinute = 1000
		a := runAdmitter(t, cfg, nil)
		_, err := a.Admit(t.Context(), Request{Class: classify.Interactive, Tokens: 5000})
		var tooLarge *ChargeTooLargeError
		if !errors.As(err, &tooLarge) || tooLarge.Key != "upstream.accounts[0].account.tokens_per_minute" {
			t.Fatalf("Admit = %v, want a ChargeTooLargeError naming upstream.accounts[0].account.tokens_per_minute", err)
		}
	})
}

// TestAccountsPinnedRequestWaitsAtItsAccount: a request pinned to its
// account (a WebSocket turn, whose connection goes there) waits there
// when it is full, never borrowing the lender the class may use.
func TestAccountsPinnedRequestWaitsAtItsAccount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := twoAccounts()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		a := runAdmitter(t, cfg, nil)
		first, err := a.Admit(t.Context(), Request{Class: classify.Bulk})
		if err != nil || first.Account() != "batch" {
			t.Fatalf("first bulk request: %v at %q, want batch", err, first.Account())
		}
		got := make(chan *Lease, 1)
		go func() {
			lease, err := a.Admit(t.Context(), Request{Class: classify.Bulk, Account: "batch", Pinned: true})
			if err != nil {
				t.Errorf("pinned: %v", err)
			}
			got <- lease
		}()
		synctest.Wait()
		select {
		case l := <-got:
			t.Fatalf("the pinned request went to %q while batch was full, want it to wait there", l.Account())
		default:
		}
		first.Release()
		synctest.Wait()
		l := <-got
		if l.Account() != "batch" {
			t.Fatalf("the pinned request went to %q, want batch", l.Account())
		}
		l.Release()
	})
}

// TestAccountsHeaderReserve: the reserve below which the provider's own
// headers hold bulk is the interactive reserve each account keeps — kept
// by an account that serves interactive (alone, lending to bulk, or with
// bulk), none at one that serves bulk alone or only lends — and the one
// account's is classes.interactive.reserve.
func TestAccountsHeaderReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := twoAccounts()
		cfg.Accounts = append(cfg.Accounts,
			Account{Name: "both", Account: AccountConfig{RequestsPerMinute: 600, MaxInFlight: 1},
				Serves: []classify.Class{classify.Interactive, classify.Bulk}},
			Account{Name: "spare", Account: AccountConfig{RequestsPerMinute: 600, MaxInFlight: 1},
				LendsTo: []classify.Class{classify.Interactive, classify.Bulk}})
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		a := runAdmitter(t, cfg, nil)
		for account, want := range map[string]float64{"chat": 0.3, "both": 0.3, "batch": 0, "spare": 0, "removed": 0} {
			if got := a.HeaderReserve(account); got != want {
				t.Errorf("HeaderReserve(%s) = %v, want %v", account, got, want)
			}
		}
		one := runAdmitter(t, DefaultConfig(), nil)
		if got, want := one.HeaderReserve(""), DefaultConfig().Classes.Interactive.Reserve; got != want {
			t.Errorf("HeaderReserve of the one account = %v, want classes.interactive.reserve %v", got, want)
		}
	})
}

// TestAccountsAmongServesOnlyThose: a request that names the accounts it
// may go to (Request.Accounts: those of its API's provider) is admitted,
// borrows and is moved among them alone, and finds nowhere to go when
// none of them serves or lends to its class.
func TestAccountsAmongServesOnlyThose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := twoAccounts()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		a := runAdmitter(t, cfg, nil)
		onlyBatch := []string{"batch"}
		first, err := a.Admit(t.Context(), Request{Class: classify.Bulk, Accounts: onlyBatch})
		if err != nil || first.Account() != "batch" {
			t.Fatalf("bulk among batch: %v at %q", err, first.Account())
		}
		// Batch is full (1 slot); chat would lend, but is not among them:
		// the next waits at batch and gets its freed slot.
		got := make(chan *Lease, 1)
		go func() {
			lease, err := a.Admit(t.Context(), Request{Class: classify.Bulk, Accounts: onlyBatch})
			if err != nil {
				t.Errorf("waiting bulk: %v", err)
			}
			got <- lease
		}()
		synctest.Wait()
		select {
		case l := <-got:
			t.Fatalf("bulk among batch alone was admitted at %q while batch was full", l.Account())
		default:
		}
		if a.Others(classify.Bulk, onlyBatch, []string{"batch"}) {
			t.Error("Others: a move found somewhere beside batch, the one account it may go to")
		}
		if !a.Others(classify.Bulk, nil, []string{"batch"}) {
			t.Error("Others: among every account, chat lends to bulk")
		}
		first.Release()
		synctest.Wait()
		if l := <-got; l.Account() != "batch" {
			t.Fatalf("the waiting request went to %q", l.Account())
		} else {
			l.Release()
		}
		if home := a.HomeAccount(classify.Interactive, onlyBatch); home != "" {
			t.Errorf("HomeAccount(interactive, [batch]) = %q, want none: batch neither serves nor lends to it", home)
		}
		if home := a.HomeAccount(classify.Bulk, []string{"chat"}); home != "chat" {
			t.Errorf("HomeAccount(bulk, [chat]) = %q, want chat, which lends to it", home)
		}
		if _, err := a.Admit(t.Context(), Request{Class: classify.Interactive, Accounts: onlyBatch}); !errors.Is(err, ErrNoAccount) {
			t.Errorf("interactive among batch alone: %v, want ErrNoAccount", err)
		}
	})
}
