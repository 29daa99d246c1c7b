package fakeprovider

import "net/http"

func (p *Provider) serveRealtime(w http.ResponseWriter, r *http.Request) {}

func realtimeError(typ, code, msg, param, eventID string) map[string]any { return nil }
