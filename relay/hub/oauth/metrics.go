package oauth

import "github.com/prometheus/client_golang/prometheus"

// The server's metrics, in the hub's registry (docs/metrics.md). Labels
// take values from closed sets: OAuth error codes and fixed outcomes.
type metrics struct {
	registrations  *prometheus.CounterVec // outcome
	authorizations *prometheus.CounterVec // outcome
	tokens         *prometheus.CounterVec // grant_type, outcome
	revocations    prometheus.Counter
	deviceGuesses  *prometheus.CounterVec // outcome
	clientsEvicted prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomrelay_hub_oauth_registrations_total",
			Help: "OAuth client registrations on this node, by outcome (ok, rate_limited, or the OAuth error code).",
		}, []string{"outcome"}),
		authorizations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomrelay_hub_oauth_authorizations_total",
			Help: "OAuth authorization requests on this node, by outcome (approved_approver, approved_device, denied, csrf, or the error).",
		}, []string{"outcome"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomrelay_hub_oauth_tokens_total",
			Help: "OAuth token endpoint calls on this node, by grant type (authorization_code: issues, refresh_token: refreshes) and outcome (ok or the OAuth error code).",
		}, []string{"grant_type", "outcome"}),
		revocations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomrelay_hub_oauth_grants_revoked_total",
			Help: "OAuth grants this node revoked (admin, RFC 7009, code replay, refresh reuse, forgotten client).",
		}),
		deviceGuesses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomrelay_hub_oauth_device_code_misses_total",
			Help: "Device-approval lookups refused on this node, by outcome (unknown: no such code, device_limited: the device gave too many unknown codes, code_dead: too many wrong tries against the code).",
		}, []string{"outcome"}),
		clientsEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomrelay_hub_oauth_clients_evicted_total",
			Help: "Never-used OAuth registrations this node evicted because the clients table was full.",
		}),
	}
	for _, g := range []string{"authorization_code", "refresh_token"} {
		m.tokens.WithLabelValues(g, "ok")
		m.tokens.WithLabelValues(g, string(codeInvalidGrant))
	}
	m.registrations.WithLabelValues("ok")
	m.authorizations.WithLabelValues("approved_approver")
	m.authorizations.WithLabelValues("approved_device")
	for _, o := range []string{"unknown", "device_limited", "code_dead"} {
		m.deviceGuesses.WithLabelValues(o)
	}
	reg.MustRegister(m.clientsEvicted, m.registrations, m.authorizations, m.tokens, m.revocations, m.deviceGuesses)
	return m
}
