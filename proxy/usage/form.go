package usage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"strings"
)

// maxFormParts bounds the parts of a multipart body ReadRequest reads:
// a transcription or an image edit has a handful. A body with more is
// refused (ErrMalformedForm) rather than read partly, since a model field
// past the bound would go unseen.
const maxFormParts = 1000

// formModel is the form field that names the model (/v1/audio/
// transcriptions, /v1/images/edits). Form fields are compared exactly, as
// form parsers (Starlette, net/http) do.
const formModel = "model"

// readMultipart reads a multipart/form-data body, in memory already, for
// its model field: every part is looked at (so a second model field is
// ErrDuplicateKey); only the model part's value is read, at most
// maxModel+1 bytes of it. A body mime/multipart cannot parse, a part with
// two Content-Disposition headers or one that does not parse, or a model
// part in a Content-Transfer-Encoding is ErrMalformedForm: another parser
// could read a field there that this one does not.
func readMultipart(body []byte, boundary string) (Request, error) {
	req := Request{Generations: 1}
	if boundary == "" {
		return req, fmt.Errorf("%w: no boundary", ErrMalformedForm)
	}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	seen := false
	for parts := 0; ; parts++ {
		part, err := mr.NextRawPart() // raw: no quoted-printable decoding behind the proxy's back
		switch {
		case errors.Is(err, io.EOF):
			return req, nil
		case err != nil:
			return req, fmt.Errorf("%w: %w", ErrMalformedForm, err)
		case parts == maxFormParts:
			return req, fmt.Errorf("%w: more than %d parts", ErrMalformedForm, maxFormParts)
		}
		name, err := partName(part)
		if err != nil || name != formModel {
			if err != nil {
				return req, err
			}
			continue
		}
		if seen {
			return req, &FieldError{Key: formModel, Err: ErrDuplicateKey}
		}
		seen = true
		if req.Model, err = partValue(part); err != nil {
			return req, err
		}
	}
}

// partName is the form field name of part (Content-Disposition's name,
// whatever the disposition).
func partName(part *multipart.Part) (string, error) {
	cd := part.Header.Values("Content-Disposition")
	if len(cd) > 1 {
		return "", fmt.Errorf("%w: a part with %d Content-Disposition headers", ErrMalformedForm, len(cd))
	}
	if len(cd) == 0 {
		return "", nil
	}
	_, params, err := mime.ParseMediaType(cd[0])
	if err != nil {
		return "", fmt.Errorf("%w: Content-Disposition: %w", ErrMalformedForm, err)
	}
	return params["name"], nil
}

// partValue reads the model part's value, as modelValue holds it.
func partValue(part *multipart.Part) (string, error) {
	switch strings.ToLower(strings.TrimSpace(part.Header.Get("Content-Transfer-Encoding"))) {
	case "", "7bit", "8bit", "binary":
	default:
		return "", fmt.Errorf("%w: the model part has a Content-Transfer-Encoding", ErrMalformedForm)
	}
	v, err := io.ReadAll(io.LimitReader(part, maxModel+1))
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrMalformedForm, err)
	}
	return modelValue(string(v))
}

// readURLEncoded reads an application/x-www-form-urlencoded body for its
// model field; one that url.ParseQuery refuses (a bad escape, a ';') is
// ErrMalformedForm, a second model field ErrDuplicateKey.
func readURLEncoded(body []byte) (Request, error) {
	req := Request{Generations: 1}
	q, err := url.ParseQuery(string(body))
	if err != nil {
		return req, fmt.Errorf("%w: %w", ErrMalformedForm, err)
	}
	switch models := q[formModel]; len(models) {
	case 0:
		return req, nil
	case 1:
		req.Model, err = modelValue(models[0])
		return req, err
	default:
		return req, &FieldError{Key: formModel, Err: ErrDuplicateKey}
	}
}
