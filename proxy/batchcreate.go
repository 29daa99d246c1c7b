package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/meterproxy/meterproxy/quota"
	"github.com/meterproxy/meterproxy/quota/gate"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/meterproxy/meterproxy/quota/store"
)

// Batch creation paths, canonical (no trailing slash).
const (
	openAIBatchesPath    = "/v1/batches"
	anthropicBatchesPath = "/v1/messages/batches"
	openAIFilesPath      = "/v1/files"
)

// reasonBatchUnmetered: a budgeted caller's batch whose requests the
// proxy did not meter (an input file uploaded around it, a line too long
// to read), which its budget cannot hold.
const reasonBatchUnmetered = "batch_unmetered"

// serveBatchCreate creates a batch through the proxy's budgets, and
// reports whether it answered: an OpenAI batch (POST /v1/batches, a small
// body naming an input file the proxy metered as it was uploaded), and a
// budgeted caller's Anthropic batch (POST /v1/messages/batches, whose
// requests are in its body, metered here). Their body is read whole, as a
// metered request's is (server.max_body_bytes): the batch's worst case
// must be reserved before the provider accepts it. An unbudgeted caller's
// Anthropic batch streams through unread (false).
func (h *Handler) serveBatchCreate(w http.ResponseWriter, r *http.Request, ex *exchange) bool {
	path := strings.TrimSuffix(r.URL.Path, "/")
	openAI := path == openAIBatchesPath && ex.rt.family == familyOpenAI
	if r.Method != http.MethodPost || !openAI && path != anthropicBatchesPath {
		return false
	}
	budgeted := h.admitter.Budgeted(ex.res.Caller, ex.res.Class)
	if !openAI && !budgeted {
		return false
	}
	if f := encodingRefusal(r.Header); f != nil {
		closeUnread(w, r)
		h.refuse(ex, *f)
		return true
	}
	body, err := h.bodies.read(w, r, false)
	if err != nil {
		h.bodyFailed(w, r, ex, err)
		return true
	}
	defer body.release()
	file, bad := h.batchFile(r.Context(), body.Bytes(), openAI, budgeted)
	if bad != nil {
		h.refuse(ex, *bad)
		return true
	}
	account, model := h.accountOf(ex), ""
	if file != nil && len(file.Models) > 0 {
		model = file.Models[0].Model
	}
	ex.at(account, h.admitter.PoolAt(account, func() quota.Model { return quota.Model{Name: model} }))
	ex.pooled = true
	hold, err := h.admitter.ReserveBatch(r.Context(), gate.BatchRequest{Caller: ex.res.Caller, Class: ex.res.Class,
		Account: account, Pool: ex.pool, File: file})
	if err != nil {
		h.batchRefused(r, ex, err)
		return true
	}
	defer hold.Release() // unless the provider's answer bound it (or its failure spent it)
	ex.batch = hold
	l := ex.poolLabels()
	h.m.admission.admissions.WithLabelValues(l.Account, l.Pool, ex.res.Class.String(), admitBatch).Inc()
	setBody(r, body.Bytes())
	h.forward(ex.rec, r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex)), ex)
	return true
}

// batchFile is what the proxy metered of the batch a creation body
// describes: an OpenAI body's input file, as its upload was metered (nil
// when the proxy never saw it), or an Anthropic body's requests. A body
// whose input file cannot be read is refused; a store that fails refuses
// a budgeted caller only.
func (h *Handler) batchFile(ctx context.Context, body []byte, openAI, budgeted bool) (*price.BatchFile, *refusal) {
	if !openAI {
		f := meterAnthropicBatch(body)
		return &f, nil
	}
	keys, err := topLevel(body, "input_file_id")
	if err != nil {
		return nil, &refusal{status: http.StatusBadRequest, reason: reasonBadRequest, kind: "invalid_request_error",
			message: "meterproxy: the batch body must be a JSON object that names input_file_id once"}
	}
	f, ok, err := h.admitter.BatchFile(ctx, keys[0].Str)
	switch {
	case err != nil && budgeted:
		h.log.Warn("budget_store_failed", slog.String("error", err.Error()))
		f, _ := reasonOf(store.ErrStoreUnavailable, 0, "")
		return nil, &f
	case err != nil || !ok:
		return nil, nil
	}
	return &f, nil
}

// batchRefused answers a batch its budgets refused.
func (h *Handler) batchRefused(r *http.Request, ex *exchange, err error) {
	class, l := ex.res.Class.String(), ex.poolLabels()
	if e, ok := errors.AsType[*gate.BatchUnmeteredError](err); ok {
		why := "meterproxy did not see its input file uploaded (upload it through meterproxy's /v1/files with purpose batch)"
		if e.Why != "" {
			why = "meterproxy could not meter its requests: " + e.Why
		}
		h.m.admission.admissions.WithLabelValues(l.Account, l.Pool, class, admitRefused).Inc()
		h.refuse(ex, refusal{status: http.StatusBadRequest, reason: reasonBatchUnmetered, kind: "invalid_request_error",
			message: fmt.Sprintf("meterproxy: budget %s cannot hold this batch: %s", e.Budget, why)})
		return
	}
	f, decided := reasonOf(err, ex.res.Class, r.Method+" "+r.URL.Path)
	if !decided && r.Context().Err() != nil {
		h.m.admission.admissions.WithLabelValues(l.Account, l.Pool, class, admitCancelled).Inc()
		return
	}
	h.m.admission.admissions.WithLabelValues(l.Account, l.Pool, class, admitRefused).Inc()
	h.refuse(ex, f)
}
