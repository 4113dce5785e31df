package streams

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jetflow/jetflow/internal/domain"
)

// Subjects. Every name that goes into a subject is a single token: queue
// names and namespaces are restricted to [A-Za-z0-9_-], and job types, which
// may contain '.', ':' and '@', are escaped with Token.
//
//	jetflow.ev.<ns>.<queue>.<type>.<id>   the events of one job (EventsStream)
//	jetflow.pc.<parent id>                what became of a parent's pieces (EventsStream)
//	jetflow.q.<queue>.batch.<type>.<id>   batches of parent <id>'s fan-out (the queue's batch stream)
//	jetflow.q.<queue>.run.<type>          runnable work items (the queue's stream)
//	jetflow.q.<queue>.sched.<id>          a job's pending delay (a message schedule)
//	jetflow.q.<queue>.due                 fired schedules, promoted to run items
//	jetflow.cmd.<verb>                    commands (request/reply)
//	jetflow.ctl.cancel                    cancel notifications to workers
const (
	EventsStream    = "JETFLOW_EVENTS"
	EventsPrefix    = "jetflow.ev"
	PiecesPrefix    = "jetflow.pc"
	JobsBucket      = "jetflow_jobs"
	QueuesBucket    = "jetflow_queues"
	queueStreamPfx  = "JETFLOW_Q_"
	batchStreamPfx  = "JETFLOW_B_"
	CommandPrefix   = "jetflow.cmd"
	CancelSubject   = "jetflow.ctl.cancel"
	tokenEscapeChar = '~'
)

// EventSubject is the subject all events of one job are appended to.
func EventSubject(ns, queue, jobType, id string) string {
	return EventsPrefix + "." + Token(ns) + "." + queue + "." + Token(jobType) + "." + id
}

// EventFilter selects the events of one job without knowing its namespace,
// queue or type.
func EventFilter(id string) string { return EventsPrefix + ".*.*.*." + id }

// EventsFilter selects the events of the jobs of a namespace, a queue and
// a type, and of the job id, "" meaning any.
func EventsFilter(ns, queue, jobType, id string) string {
	any := func(tok string) string {
		if tok == "" {
			return "*"
		}
		return tok
	}
	return EventsPrefix + "." + any(Token(ns)) + "." + any(queue) + "." + any(Token(jobType)) + "." + any(id)
}

// EventScope is the namespace, queue and type of the job an event subject
// (jetflow.ev.<ns>.<queue>.<type>.<id>) is of.
func EventScope(subject string) (ns, queue, jobType string, ok bool) {
	parts := strings.Split(subject, ".")
	if len(parts) != 6 || parts[0]+"."+parts[1] != EventsPrefix {
		return "", "", "", false
	}
	ns, err1 := ParseToken(parts[2])
	jobType, err2 := ParseToken(parts[4])
	return ns, parts[3], jobType, err1 == nil && err2 == nil
}

// PieceSubject is where the outcomes of a parent's pieces are recorded.
func PieceSubject(parent string) string { return PiecesPrefix + "." + parent }

// IsPieceSubject reports whether subj holds piece events rather than a job's.
func IsPieceSubject(subj string) bool { return strings.HasPrefix(subj, PiecesPrefix+".") }

// BatchSubject is where the batches of one parent's fan-out go: one
// subject per parent, so that the batches a parent no longer wants can be
// purged at once when it ends.
func BatchSubject(queue, batchType, parent string) string {
	return "jetflow.q." + queue + ".batch." + Token(batchType) + "." + parent
}

// BatchFilter selects the batches of one batch type on a queue, of every
// parent. The type is one token, so the filters of two types never overlap
// (a work-queue stream refuses overlapping consumers).
func BatchFilter(queue, batchType string) string {
	return "jetflow.q." + queue + ".batch." + Token(batchType) + ".*"
}

// QueueStream is the name of a queue's work-queue stream.
func QueueStream(queue string) string { return queueStreamPfx + queue }

// queueSubjects are the subjects a queue's stream captures: its run items,
// its delays and their firings. A queue's batches have a stream of their
// own (BatchStream), except on a queue stream made by a build before that
// (LegacyQueueSubject), which holds them too.
func queueSubjects(queue string) []string {
	return []string{RunFilter(queue), "jetflow.q." + queue + ".sched.*", DueSubject(queue)}
}

// LegacyQueueSubject is what a queue stream made before batch streams
// captures: everything of the queue, its batches too.
func LegacyQueueSubject(queue string) string { return "jetflow.q." + queue + ".>" }

// BatchStream is the name of a queue's batch stream: the work items of its
// fan-outs' batches, kept apart from its run items because, unlike them,
// nothing could send a lost one again (Topology.batchConfig).
func BatchStream(queue string) string { return batchStreamPfx + queue }

// QueueOfStream returns the queue whose queue stream or batch stream is
// named stream, and false for any other stream.
func QueueOfStream(stream string) (string, bool) {
	if q, ok := strings.CutPrefix(stream, queueStreamPfx); ok {
		return q, true
	}
	return strings.CutPrefix(stream, batchStreamPfx)
}

// RunSubject is where runnable work items of one job type on a queue go.
func RunSubject(queue, jobType string) string { return "jetflow.q." + queue + ".run." + Token(jobType) }

// RunFilter selects the run items of every job type on a queue ("*": on
// every queue).
func RunFilter(queue string) string { return "jetflow.q." + queue + ".run.*" }

// SchedSubject holds the message schedule of one job's pending delay. A job
// has at most one: a new schedule on the subject replaces the old one.
func SchedSubject(queue, id string) string { return "jetflow.q." + queue + ".sched." + id }

// DueSubject receives fired schedules of a queue.
func DueSubject(queue string) string { return "jetflow.q." + queue + ".due" }

// KVKey is the key of a job's record in JobsBucket.
func KVKey(id string) string { return id }

// KVSubject is the subject behind a job's KV key, for pipelined
// revision-checked writes.
func KVSubject(id string) string { return "$KV." + JobsBucket + "." + id }

// Token escapes a name into one subject token that is also a valid consumer
// name and file name: every byte outside [A-Za-z0-9_-] becomes ~XX (hex).
// "demo.echo" -> "demo~2Eecho".
func Token(s string) string {
	if domain.IsPlain(s) {
		return s
	}
	if t, ok := tokens.Load(s); ok {
		return t.(string)
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if domain.PlainByte(c) {
			b = append(b, c)
		} else {
			b = append(b, tokenEscapeChar, hex[c>>4], hex[c&0xF])
		}
	}
	t := string(b)
	if tokenCount.Load() < maxCachedTokens {
		if _, loaded := tokens.LoadOrStore(s, t); !loaded {
			tokenCount.Add(1)
		}
	}
	return t
}

// tokens caches Token's escapes (a job's type is escaped into the subject
// of each of its events and work items); maxCachedTokens bounds it, as
// names come from outside.
var (
	tokens     sync.Map
	tokenCount atomic.Int64
)

const maxCachedTokens = 4096

// ParseToken reverses Token.
func ParseToken(t string) (string, error) {
	if !strings.ContainsRune(t, tokenEscapeChar) {
		return t, nil
	}
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		if t[i] != tokenEscapeChar {
			b.WriteByte(t[i])
			continue
		}
		if i+2 >= len(t) {
			return "", fmt.Errorf("token %q: truncated escape", t)
		}
		var c byte
		if _, err := fmt.Sscanf(t[i+1:i+3], "%02X", &c); err != nil {
			return "", fmt.Errorf("token %q: bad escape: %w", t, err)
		}
		b.WriteByte(c)
		i += 2
	}
	return b.String(), nil
}

// JobSubject is the subject a job's events are appended to.
func JobSubject(j *domain.Job) string {
	return EventSubject(j.Spec.Namespace, j.Spec.Queue, j.Spec.Type, j.ID)
}

// BatchesFilter selects the batches of every batch type on a queue.
func BatchesFilter(queue string) string { return "jetflow.q." + queue + ".batch.>" }

// SubjectMatches reports whether subject matches filter (tokens, '*' for
// one token and a final '>' for the rest).
func SubjectMatches(filter, subject string) bool {
	for {
		f, frest, fmore := strings.Cut(filter, ".")
		t, trest, tmore := strings.Cut(subject, ".")
		switch {
		case f == ">":
			return true
		case f != "*" && f != t:
			return false
		case !fmore || !tmore:
			return fmore == tmore
		}
		filter, subject = frest, trest
	}
}
