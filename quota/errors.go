package quota

import (
	"errors"
)

// ErrPoolRemoved means a reload removed the pool the request waited
// in: retrying admits it to the pool its model draws on now.
var ErrPoolRemoved = errors.New("quota: the request's pool was removed by a reload")
