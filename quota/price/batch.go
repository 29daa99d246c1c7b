package price

import "fmt"

// A provider's Batch API runs many requests at once, later, at the batch
// price: a caller with $5 a day could submit a batch worth $500. So the
// proxy meters what it forwards to a batch — an OpenAI input file's lines
// as they stream through /v1/files, an Anthropic batch's requests from its
// body — into a BatchFile, and a budgeted caller's batch reserves the
// file's worst case at the batch price (quota's Admitter.ReserveBatch)
// until the batch reports what it used (Admitter.EndBatch).

// MaxBatchModels is the most distinct models a BatchFile counts apart: a
// batch is for one model (OpenAI requires it), and a file naming more is
// not metered (BatchFile.Unmetered).
const MaxBatchModels = 16

// BatchFile is what the proxy metered of the requests of one batch (an
// input file's lines, or a batch body's requests): by model, their count,
// input estimates and output caps. The zero value is an empty file.
type BatchFile struct {
	// Models are the sums by model, at most MaxBatchModels.
	Models []BatchModel `json:"models"`
	// Unmetered, when set, says why the proxy could not meter every
	// request (a line longer than it reads, one it could read otherwise
	// than the provider, too many models): a budget cannot reserve for
	// such a file, and refuses its batch.
	Unmetered string `json:"unmetered,omitempty"`
}

// BatchModel is the requests of a BatchFile for one model.
type BatchModel struct {
	// Model is the model the requests name ("" for none).
	Model string `json:"model"`
	// Lines is how many requests; Input the sum of their input estimates;
	// Output the sum of the output caps they set; Uncapped how many set
	// none (each then counts its price's max_output).
	Lines    int64 `json:"lines"`
	Input    int64 `json:"input"`
	Output   int64 `json:"output"`
	Uncapped int64 `json:"uncapped"`
}

// Add counts one request for model, of input tokens estimated and output
// cap: 0 when it sets none, below 0 when it generates nothing (an
// embedding). A model beyond MaxBatchModels marks the file unmetered.
// Sums saturate at maxPricedTokens.
func (f *BatchFile) Add(model string, input, output int64) {
	i := 0
	for i < len(f.Models) && f.Models[i].Model != model {
		i++
	}
	if i == len(f.Models) {
		if i == MaxBatchModels {
			f.Fail(fmt.Sprintf("it names more than %d models", MaxBatchModels))
			return
		}
		f.Models = append(f.Models, BatchModel{Model: model})
	}
	m := &f.Models[i]
	m.Lines = sumTokens(m.Lines, 1)
	m.Input = sumTokens(m.Input, input)
	switch {
	case output > 0:
		m.Output = sumTokens(m.Output, output)
	case output == 0:
		m.Uncapped = sumTokens(m.Uncapped, 1)
	}
}

// Fail marks the file unmetered for why, the first reason kept.
func (f *BatchFile) Fail(why string) {
	if f.Unmetered == "" {
		f.Unmetered = why
	}
}

// Lines is how many requests the file counts.
func (f BatchFile) Lines() int64 {
	var n int64
	for _, m := range f.Models {
		n = sumTokens(n, m.Lines)
	}
	return n
}

// InputTokens is the sum of the file's input estimates.
func (f BatchFile) InputTokens() int64 {
	var n int64
	for _, m := range f.Models {
		n = sumTokens(n, m.Input)
	}
	return n
}

// sumTokens is a + b within [0, maxPricedTokens].
func sumTokens(a, b int64) int64 {
	return min(max(a, 0)+min(max(b, 0), maxPricedTokens), maxPricedTokens)
}
