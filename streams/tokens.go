package streams

// Access tokens are event-sourced like the registry: their events go to
// the event log on a subject of their own, and their state is a
// projection in a KV bucket. Only a hash of a token's secret is stored.
//
//	jetflow.reg.token.<id>   a token's creation and revocation
const TokensBucket = "jetflow_tokens"

// TokenSubject is the subject of a token's events.
func TokenSubject(id string) string { return RegistryPrefix + ".token." + Token(id) }
