// Package test holds meterproxy's integration and end-to-end tests: real processes, a real fake provider, and a real redis-server.
package test
