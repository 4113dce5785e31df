package streams

import (
	"strings"

	"github.com/jetflow/jetflow/internal/domain"
)

// The type registry and namespaces are event-sourced like jobs: their
// events go to the event log on subjects of their own, and their state is
// a projection in KV buckets.
//
//	jetflow.reg.type.<scope>.<category>.<name>   a type's registrations and deletion
//	jetflow.reg.ns.<namespace>                   a namespace's settings
const (
	RegistryPrefix   = "jetflow.reg"
	TypesBucket      = "jetflow_types"
	NamespacesBucket = "jetflow_namespaces"
)

// TypeSubject is the subject of a type's events.
func TypeSubject(scope, category, name string) string {
	return RegistryPrefix + ".type." + Token(scope) + "." + Token(category) + "." + Token(name)
}

// NamespaceSubject is the subject of a namespace's events.
func NamespaceSubject(ns string) string { return RegistryPrefix + ".ns." + Token(ns) }

// IsJobSubject reports whether subj holds a job's events (not piece or
// registry events).
func IsJobSubject(subj string) bool { return strings.HasPrefix(subj, EventsPrefix+".") }

// IsRegistrySubject reports whether subj holds registry events.
func IsRegistrySubject(subj string) bool { return strings.HasPrefix(subj, RegistryPrefix+".") }

// KVToken escapes a name into characters a KV key allows: every byte
// outside [A-Za-z0-9_-] becomes =XX (hex).
func KVToken(s string) string {
	if domain.IsPlain(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; domain.PlainByte(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('=')
			b.WriteByte("0123456789ABCDEF"[c>>4])
			b.WriteByte("0123456789ABCDEF"[c&15])
		}
	}
	return b.String()
}

// TypeKey is a type's key in TypesBucket.
func TypeKey(scope, category, name string) string {
	return KVToken(scope) + "." + KVToken(category) + "." + KVToken(name)
}
