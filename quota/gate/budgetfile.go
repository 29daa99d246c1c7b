package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/meterproxy/meterproxy/quota/price"
)

// budgetSaveEvery is how often an in-process budget store writes its
// spend to store.spend_file when it changed: a kill -9 loses at most the
// spend settled and reserved in the last second before it.
const budgetSaveEvery = time.Second

// maxSpendFile bounds what is read of a spend file: a budget period is
// one small JSON object, and a file this large is not one meterproxy
// wrote.
const maxSpendFile = 16 << 20

// spendFile is the spend file's content: every budget period's spend,
// reservations not yet settled counted in full (the safe side: a process
// killed with requests in flight cannot tell what they cost).
type spendFile struct {
	Version int          `json:"version"`
	Budgets []spendEntry `json:"budgets"`
}

// spendEntry is one budget period in a spend file.
type spendEntry struct {
	Budget string            `json:"budget"`
	Period string            `json:"period"`
	Spent  price.Nanodollars `json:"spent_nanodollars"`
}

// spendFileVersion is the format written; another is refused at load.
const spendFileVersion = 1

// Load reads the spend kept in path into m; a file that does not exist is
// no spend yet. An unreadable or malformed file is an error: starting
// from zero would forget what was spent.
func (m *MemoryBudgets) Load(path string) error {
	f, err := os.Open(path) //nolint:gosec // G304: the operator's store.spend_file
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	var data spendFile
	dec := json.NewDecoder(io.LimitReader(f, maxSpendFile)) // a longer file ends early: malformed
	if err := dec.Decode(&data); err != nil {
		return fmt.Errorf("%s: not a spend file meterproxy wrote: %w", path, err)
	}
	if data.Version != spendFileVersion {
		return fmt.Errorf("%s: spend file version %d, want %d", path, data.Version, spendFileVersion)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range data.Budgets {
		b := m.slot(budgetKey{Budget: e.Budget, Period: e.Period})
		b.use.Spent = b.use.Spent.Plus(e.Spent)
	}
	return nil
}

// Save writes m's spend to path if it changed since the last save: to a
// temporary file beside it, synced, then renamed over it, so that a crash
// leaves the old file or the new one, never a part.
func (m *MemoryBudgets) Save(path string) error {
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	m.mu.Lock()
	if !m.dirty {
		m.mu.Unlock()
		return nil
	}
	data := spendFile{Version: spendFileVersion}
	for s, b := range m.slots {
		data.Budgets = append(data.Budgets, spendEntry{Budget: s.budget, Period: s.period, Spent: b.use.Spent.Plus(b.use.Reserved)})
	}
	m.dirty = false
	m.mu.Unlock()
	err := writeFileAtomic(path, data)
	if err != nil {
		m.mu.Lock()
		m.dirty = true // try again next time
		m.mu.Unlock()
	}
	return err
}

// writeFileAtomic writes v as JSON to path through a synced temporary
// file renamed over it.
func writeFileAtomic(path string, v any) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone after the rename; else a leftover
	if err := json.NewEncoder(tmp).Encode(v); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Keep saves m to path every budgetSaveEvery until ctx ends, and once
// more then. A failed save is logged and tried again.
func (m *MemoryBudgets) Keep(ctx context.Context, path string, log *slog.Logger) {
	t := time.NewTicker(budgetSaveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := m.Save(path); err != nil {
				log.Error("spend_file_save_failed", slog.String("file", path), slog.String("error", err.Error()))
			}
			return
		case <-t.C:
			if err := m.Save(path); err != nil {
				log.Warn("spend_file_save_failed", slog.String("file", path), slog.String("error", err.Error()))
			}
		}
	}
}
