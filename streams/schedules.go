package streams

// Schedules are event-sourced like the registry: a schedule's changes and
// ticks go to the event log on a subject of its own, and their fold is
// its record in a KV bucket.
//
//	jetflow.reg.schedule.<namespace>.<name>   a schedule's changes and ticks
const SchedulesBucket = "jetflow_schedules"

// ScheduleSubject is the subject of a schedule's events.
func ScheduleSubject(ns, name string) string {
	return RegistryPrefix + ".schedule." + Token(ns) + "." + Token(name)
}

// ScheduleKey is a schedule's key in SchedulesBucket.
func ScheduleKey(ns, name string) string { return KVToken(ns) + "." + KVToken(name) }
