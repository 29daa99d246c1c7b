// Package runtest holds what tests that run goroutines share: Start runs a
// component's Run loop until the test ends, and Buffer collects what the
// goroutines log.
package runtest
