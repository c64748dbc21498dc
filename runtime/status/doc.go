// Package status is a job's status server and the JSON types it serves:
// the HTTP endpoints runtime.WithHTTP starts beside a job (/metrics,
// /healthz, /readyz, /api/v1/job, the live page at /, POST
// /api/v1/job/stop and POST /api/v1/savepoints), their options (a
// token, TLS, limits, the host names answered), and Job, the snapshot
// runtime's Environment.Status returns and /api/v1/job serves.
//
// The server reads and acts on the job through Runner, which runtime's
// Environment implements for each Execute; the package imports nothing
// of the engine, so operator tools read the JSON with these types
// without linking the runtime.
//
// Invariants it keeps:
//   - The JSON field names, paths, status codes and headers are an
//     operator contract (cmd/splitflow, dashboards and probes read them):
//     a field is added, never renamed.
//   - Every route that is not GET or HEAD changes the job and needs the
//     token (WithToken), checked by method after routing, so a route
//     added later needs nothing of its own; without a token they answer
//     403.
//   - A request is answered only when its Host names the server
//     (loopback names, IP addresses, the address's host,
//     WithAllowedHosts), 421 otherwise: DNS rebinding reads nothing.
//   - What a client can hold is bounded: WithReadTimeout per request,
//     WithMaxConns connections, 16 KiB of headers, 64 KiB of body.
//   - The page runs no code but its own (a Content-Security-Policy with
//     the hashes of its one script and style block) and loads nothing
//     from elsewhere.
package status
