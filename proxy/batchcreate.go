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

// batches is the part of the handler that serves the batch and file
// endpoints, whose bodies stream through (open): a batch's creation
// reserved against its budgets (create), an upload to /v1/files metered
// as it passes (uploadMeter), and their answers read for what they say
// of the batch (batchobject.go). Safe for concurrent use.
type batches struct {
	shared
	accounts *accounts
	// maxUpload is server.max_upload_bytes.
	maxUpload int64
}

// open readies a batch or upload request to stream upstream (the
// provider's separate quota: the windows are not charged; counted in
// meterproxy_admissions_total as outcome batch or upload), and returns
// done, to call once it has been forwarded; ok is false when it answered
// the request itself. A batch's creation goes through the budgets
// instead (create), and an upload to /v1/files is metered as it passes
// (uploadMeter).
func (b *batches) open(w http.ResponseWriter, r *http.Request, ex *exchange) (done func(), ok bool) {
	if !ex.live.Shadow {
		if done, create := b.create(w, r, ex); create {
			return done, done != nil
		}
	}
	sb, err := b.bodies.streamBody(w, r, b.maxUpload)
	if err != nil {
		bodyFailed(w, r, ex, err)
		return nil, false
	}
	done = sb.stop
	ex.upload.body = sb
	if r.Method == http.MethodPost && strings.TrimSuffix(r.URL.Path, "/") == openAIFilesPath && ex.rt.family == familyOpenAI {
		if sb.meter = newUploadMeter(r.Header.Get("Content-Type"), b.bodies.budget); sb.meter != nil {
			ex.upload.meter = sb.meter
			done = func() {
				sb.meter.stop()
				sb.stop()
			}
		}
	}
	ex.at(b.accounts.of(ex), ex.dest.pool)
	outcome := admitBatch
	if ex.rt.kind == routeUpload {
		outcome = admitUpload
	}
	l := ex.poolLabels()
	b.m.admission.admissions.WithLabelValues(l.Account, l.Pool, ex.res.Class.String(), outcome).Inc()
	return done, true
}

// create readies a batch's creation to go upstream through the proxy's
// budgets, and reports whether it is one it creates (create): an OpenAI
// batch (POST /v1/batches, a small body naming an input file the proxy
// metered as it was uploaded), and a budgeted caller's Anthropic batch
// (POST /v1/messages/batches, whose requests are in its body, metered
// here). Their body is read whole, as a metered request's is
// (server.max_body_bytes): the batch's worst case must be reserved before
// the provider accepts it. done is to be called once it was forwarded;
// nil when it was answered here (refused). An unbudgeted caller's
// Anthropic batch streams through unread (create false).
func (b *batches) create(w http.ResponseWriter, r *http.Request, ex *exchange) (done func(), create bool) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	openAI := path == openAIBatchesPath && ex.rt.family == familyOpenAI
	if r.Method != http.MethodPost || !openAI && path != anthropicBatchesPath {
		return nil, false
	}
	budgeted := b.admitter.Budgeted(ex.res.Caller, ex.res.Class)
	if !openAI && !budgeted {
		return nil, false
	}
	if f := encodingRefusal(r.Header); f != nil {
		closeUnread(w, r)
		ex.refuse(*f)
		return nil, true
	}
	body, err := b.bodies.read(w, r, false)
	if err != nil {
		bodyFailed(w, r, ex, err)
		return nil, true
	}
	file, bad := b.file(r.Context(), body.Bytes(), openAI, budgeted)
	if bad != nil {
		body.release()
		ex.refuse(*bad)
		return nil, true
	}
	account, model := b.accounts.of(ex), ""
	if file != nil && len(file.Models) > 0 {
		model = file.Models[0].Model
	}
	ex.at(account, b.admitter.PoolAt(account, func() quota.Model { return quota.Model{Name: model} }))
	ex.dest.pooled = true
	hold, err := b.admitter.ReserveBatch(r.Context(), gate.BatchRequest{Caller: ex.res.Caller, Class: ex.res.Class,
		Account: account, Pool: ex.dest.pool, File: file})
	if err != nil {
		body.release()
		b.refused(r, ex, err)
		return nil, true
	}
	ex.tally.batch = hold
	l := ex.poolLabels()
	b.m.admission.admissions.WithLabelValues(l.Account, l.Pool, ex.res.Class.String(), admitBatch).Inc()
	setBody(r, body.Bytes())
	return func() {
		hold.Release() // unless the provider's answer bound it (or its failure spent it)
		body.release()
	}, true
}

// file is what the proxy metered of the batch a creation body
// describes: an OpenAI body's input file, as its upload was metered (nil
// when the proxy never saw it), or an Anthropic body's requests. A body
// whose input file cannot be read is refused; a store that fails refuses
// a budgeted caller only.
func (b *batches) file(ctx context.Context, body []byte, openAI, budgeted bool) (*price.BatchFile, *refusal) {
	if !openAI {
		f := meterAnthropicBatch(body)
		return &f, nil
	}
	keys, err := topLevel(body, "input_file_id")
	if err != nil {
		return nil, &refusal{status: http.StatusBadRequest, reason: reasonBadRequest, kind: "invalid_request_error",
			message: "meterproxy: the batch body must be a JSON object that names input_file_id once"}
	}
	f, ok, err := b.admitter.BatchFile(ctx, keys[0].Str)
	switch {
	case err != nil && budgeted:
		b.log.Warn("budget_store_failed", slog.String("error", err.Error()))
		f, _ := reasonOf(store.ErrStoreUnavailable, 0, apiName{})
		return nil, &f
	case err != nil || !ok:
		return nil, nil
	}
	return &f, nil
}

// refused answers a batch its budgets refused.
func (b *batches) refused(r *http.Request, ex *exchange, err error) {
	class, l := ex.res.Class.String(), ex.poolLabels()
	if e, ok := errors.AsType[*gate.BatchUnmeteredError](err); ok {
		why := "meterproxy did not see its input file uploaded (upload it through meterproxy's /v1/files with purpose batch)"
		if e.Why != "" {
			why = "meterproxy could not meter its requests: " + e.Why
		}
		b.m.admission.admissions.WithLabelValues(l.Account, l.Pool, class, admitRefused).Inc()
		ex.refuse(refusal{status: http.StatusBadRequest, reason: reasonBatchUnmetered, kind: "invalid_request_error",
			message: fmt.Sprintf("meterproxy: budget %s cannot hold this batch: %s", e.Budget, why)})
		return
	}
	f, decided := reasonOf(err, ex.res.Class, apiName{r.Method, r.URL.Path})
	if !decided && r.Context().Err() != nil {
		b.m.admission.admissions.WithLabelValues(l.Account, l.Pool, class, admitCancelled).Inc()
		return
	}
	b.m.admission.admissions.WithLabelValues(l.Account, l.Pool, class, admitRefused).Inc()
	ex.refuse(f)
}
