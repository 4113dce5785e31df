package subscribe

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/streams"
)

// Metadata keys of a delivered message: where the event's job lives, read
// from the event's subject (jetflow.ev.<namespace>.<queue>.<type>.<id>),
// for handlers and middleware that route or log by them. The job id is the
// event's JobID.
const (
	NamespaceKey = "jetflow_namespace"
	QueueKey     = "jetflow_queue"
	JobTypeKey   = "jetflow_job_type"
)

// Event decodes a message delivered by a Subscriber into the event it
// carries: the same view of an event as jetflow.EventInfo (Client.Events),
// with Seq, the event's sequence in the log, taken from msg.UUID.
//
// The error matches jetflow.ErrBadEvent when the payload is not a jetflow
// event; such a message will not decode on a later delivery either.
func Event(msg *message.Message) (*jetflow.EventInfo, error) {
	seq, err := strconv.ParseUint(msg.UUID, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("subscribe: message %q: its UUID is not an event sequence", msg.UUID)
	}
	e, err := jetflow.DecodeEvent(msg.Payload, seq)
	if err != nil {
		return nil, fmt.Errorf("subscribe: event %d: %w", seq, err)
	}
	return e, nil
}

// unmarshaler makes a watermill message of an event: the msgpack event as
// the payload (decoded by Event), the stream sequence as the UUID, the job's
// place as metadata. It never fails: watermill-nats goes on with the message
// it returns even when it returns an error, and a payload that does not
// decode is the handler's to see (Event's error).
type unmarshaler struct{}

func (unmarshaler) Unmarshal(m jetstream.Msg) (*message.Message, error) {
	var id string
	if md, err := m.Metadata(); err == nil {
		id = strconv.FormatUint(md.Sequence.Stream, 10)
	}
	wm := message.NewMessage(id, m.Data())
	wm.Metadata = subjectMetadata(m.Subject())
	return wm, nil
}

// subjectMetadata reads a job's namespace, queue and type from an event
// subject; what does not parse is left out.
func subjectMetadata(subject string) message.Metadata {
	md := message.Metadata{}
	tok := strings.Split(subject, ".")
	if len(tok) != 6 || tok[0]+"."+tok[1] != streams.EventsPrefix {
		return md
	}
	if ns, err := streams.ParseToken(tok[2]); err == nil {
		md.Set(NamespaceKey, ns)
	}
	md.Set(QueueKey, tok[3])
	if t, err := streams.ParseToken(tok[4]); err == nil {
		md.Set(JobTypeKey, t)
	}
	return md
}
