package adaptive

import "math"

// shareEpsilon absorbs float noise such as 10000·0.3.
const shareEpsilon = 1e-9

// Part is floor(total·fraction), robust to float noise: a class's part of
// a bound or a rate. quota's class partition rounds with it too, so that
// the part of the bound the controller expects bulk to hold (BulkPart) is
// the part the store lets bulk hold.
func Part(total int64, fraction float64) int64 {
	return int64(math.Floor(float64(total)*fraction + shareEpsilon))
}
