package domain

// Names. Queue names and namespaces are restricted to [A-Za-z0-9_-], so
// that each is one subject token and a valid consumer and file name as it
// is; job types may also contain '.', ':' and '@' (streams escapes them
// into subject tokens).
const (
	DefaultNS    = "default"
	DefaultQueue = "default"
	maxNameLen   = 64
	maxTypeLen   = 128
)

// PlainByte reports whether c may stand in a name as it is: [A-Za-z0-9_-].
func PlainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// IsPlain reports whether every byte of s is a PlainByte.
func IsPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if !PlainByte(s[i]) {
			return false
		}
	}
	return true
}

// ValidQueue reports whether q can name a queue: 1-64 of [A-Za-z0-9_-].
func ValidQueue(q string) bool { return q != "" && len(q) <= maxNameLen && IsPlain(q) }

// ValidNamespace reports whether ns can name a namespace: 1-64 of
// [A-Za-z0-9_-], or one of the reserved "@global" and "@internal".
func ValidNamespace(ns string) bool {
	return ns == "@global" || ns == "@internal" || (ns != "" && len(ns) <= maxNameLen && IsPlain(ns))
}

// ValidType reports whether t can name a job type: 1-128 printable ASCII
// characters from [A-Za-z0-9_-.:@], not starting or ending with '.'.
func ValidType(t string) bool {
	if t == "" || len(t) > maxTypeLen || t[0] == '.' || t[len(t)-1] == '.' {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !PlainByte(c) && c != '.' && c != ':' && c != '@' {
			return false
		}
	}
	return true
}
