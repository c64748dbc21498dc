package keyed

// Scope makes the type that embeds it (runtime's KeyedContext) a
// state.Context, the context a descriptor's state is reached through. Its
// method is unexported, so no type outside this module can be one: a
// descriptor is used from a keyed function's context only.
type Scope struct{ host Host }

// NewScope is the Scope of h, the keyed state of an operator subtask.
func NewScope(h Host) Scope { return Scope{host: h} }

func (s Scope) scopeHost() Host { return s.host }

// Scoped is what embeds a Scope; state.Context is it.
type Scoped interface{ scopeHost() Host }

// HostOf is the keyed state c reaches.
func HostOf(c Scoped) Host { return c.scopeHost() }
