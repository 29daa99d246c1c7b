package quota

import (
	"errors"
)

// ErrPoolRemoved means a reload removed the pool the request waited
// in: retrying admits it to the pool its model draws on now.
var ErrPoolRemoved = errors.New("quota: the request's pool was removed by a reload")

// ErrNoAccount means no account the request may be admitted at
// (Request.Accounts) serves its class or lends to it: it has nowhere to
// wait.
var ErrNoAccount = errors.New("quota: no account the request may go to serves its class")
