package checkpoint

import (
	"net/url"
	"regexp"
	"strings"
)

// redactEndpoint is an S3 endpoint URL as errors and logs may show it: its
// scheme, host and path, without the user, password, query or fragment
// that an endpoint may carry (http://user:password@host, a signed query)
// and that an error message or a log line would hand to whoever reads it.
func redactEndpoint(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// Not a URL the SDK can use either; cut what could be secret by
		// hand: everything up to an '@', and from the first '?' or '#'.
		s := raw
		if i := strings.IndexAny(s, "?#"); i >= 0 {
			s = s[:i]
		}
		if i := strings.LastIndex(s, "@"); i >= 0 {
			scheme := ""
			if j := strings.Index(s, "://"); j >= 0 && j < i {
				scheme = s[:j+3]
			}
			s = scheme + s[i+1:]
		}
		return s
	}
	u.User = nil
	u.RawQuery, u.ForceQuery = "", false
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// userinfoInURL finds the user (and password) part of any URL in a text.
var userinfoInURL = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s"'\x60@]*@`)

// endpointRedactedError is an error of a request to the S3 endpoint whose
// text (the SDK's, which quotes the endpoint it could not use or the URL
// it sent) has the endpoint's secrets cut out as redactEndpoint cuts them.
// Unwrap keeps the SDK's error reachable with errors.Is and errors.As.
type endpointRedactedError struct {
	err      error
	endpoint string // as configured, secrets and all
}

func (e *endpointRedactedError) Error() string {
	s := e.err.Error()
	if e.endpoint != "" {
		s = strings.ReplaceAll(s, e.endpoint, redactEndpoint(e.endpoint))
		if u, err := url.Parse(e.endpoint); err == nil && u.RawQuery != "" {
			s = strings.ReplaceAll(s, u.RawQuery, "")
		}
	}
	return userinfoInURL.ReplaceAllString(s, "$1")
}

func (e *endpointRedactedError) Unwrap() error { return e.err }

// redactEndpointIn wraps err, when there is one, so that its text never
// shows the endpoint's user, password or query.
func redactEndpointIn(err error, endpoint string) error {
	if err == nil {
		return nil
	}
	return &endpointRedactedError{err: err, endpoint: endpoint}
}
