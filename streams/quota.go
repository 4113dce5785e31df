package streams

// QueueLimitsSubject is the subject of a queue's limit changes.
func QueueLimitsSubject(queue string) string { return RegistryPrefix + ".queue." + queue }

// Admission requests, answered by the admitter of the leading engine:
//
//	jetflow.adm.position   body: a job id; reply {"pending": bool, "position": n}
//	jetflow.adm.counts     body: a queue name (empty: every queue); reply {queue: counts}
const (
	AdmissionPosition = "jetflow.adm.position"
	AdmissionCounts   = "jetflow.adm.counts"
)
