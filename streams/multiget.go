package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// answerWait is how long a direct get waits for each message of its
// answer when its context has no deadline (as jetstream's own API calls
// do), and answerWaitLong when it has one further off (a caller's earlier
// deadline is kept): a request taken by a server that then dies is never
// answered, and a reconnect does not fail it. Without a bound a caller
// with context.Background() (a worker checking a child's parent just after
// its claim) or with a long deadline (a handler reading its step's inputs
// under a job timeout of an hour) would wait that long, holding its job.
// The longer wait leaves room for an answer the server computes by a long
// scan (a wildcard filter over a large cold stream).
var (
	answerWait     = 5 * time.Second
	answerWaitLong = 30 * time.Second
)

// bounded is ctx with answerWait or answerWaitLong (ctx's own deadline if
// earlier).
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithTimeout(ctx, answerWaitLong)
	}
	return context.WithTimeout(ctx, answerWait)
}

// maxMultiLast is the server's cap on subjects answered by one multi_last
// direct get (more makes it answer 413 Too Many Results).
const maxMultiLast = 1000

// lastMsg is the last message on one subject, as a multi-last get returns it.
type lastMsg struct {
	Subject string
	Seq     uint64
	Data    []byte
	Deleted bool // a KV delete or purge marker
}

// MultiLast returns the last message of each of subjects in stream (which
// must allow direct gets), with one request per thousand subjects. Subjects
// with no message are absent from the map; so may be subjects the server
// left out because the answer grew too large, so a caller that needs
// certainty looks those up one by one.
func MultiLast(ctx context.Context, nc *nats.Conn, stream string, subjects []string) (map[string]lastMsg, error) {
	out := make(map[string]lastMsg, len(subjects))
	for len(subjects) > 0 {
		n := min(len(subjects), maxMultiLast)
		if err := multiLast(ctx, nc, stream, subjects[:n], out); err != nil {
			return nil, err
		}
		subjects = subjects[n:]
	}
	return out, nil
}

func multiLast(ctx context.Context, nc *nats.Conn, stream string, subjects []string, out map[string]lastMsg) error {
	req := struct {
		MultiLast []string `json:"multi_last"`
		Batch     int      `json:"batch"`
	}{subjects, len(subjects)}
	_, err := DirectBatch(ctx, nc, stream, req, func(m *nats.Msg) error {
		seq, _ := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		subj := m.Header.Get("Nats-Subject")
		op := m.Header.Get("KV-Operation")
		out[subj] = lastMsg{Subject: subj, Seq: seq, Data: m.Data, Deleted: op == "DEL" || op == "PURGE"}
		return nil
	})
	return err
}

// DirectBatch sends one batched direct get to stream (req, which must allow
// direct gets, is the request, marshalled to JSON: "batch", "seq",
// "next_by_subj", "start_time", "multi_last", ...) and calls fn with each
// message of the answer, in order; an error from fn ends the read and is
// returned. It returns how many more messages matched than the batch held
// (the end-of-batch marker's Nats-Num-Pending), 0 when nothing (more)
// matched.
func DirectBatch(ctx context.Context, nc *nats.Conn, stream string, req any, fn func(*nats.Msg) error) (uint64, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return 0, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, body); err != nil {
		return 0, err
	}
	for {
		m, err := nextAnswer(ctx, sub)
		if err != nil {
			return 0, fmt.Errorf("direct get on %s: %w", stream, err)
		}
		if status := m.Header.Get("Status"); status != "" {
			switch status {
			case "204": // end of batch
				pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				return pending, nil
			case "404": // nothing (more) matched
				return 0, nil
			default:
				return 0, fmt.Errorf("direct get on %s: %s %s", stream, status, m.Header.Get("Description"))
			}
		}
		if err := fn(m); err != nil {
			return 0, err
		}
	}
}

// nextAnswer is the next message of a direct get's answer, waited for as
// bounded says.
func nextAnswer(ctx context.Context, sub *nats.Subscription) (*nats.Msg, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	return sub.NextMsgWithContext(ctx)
}

// LastSeqOnLeader is the sequence of the last message on subject in
// stream as the stream's leader has it (0: none): a plain message get,
// which only the leader answers, where a direct get may be answered by a
// replica behind it. It waits at most answerWait.
func LastSeqOnLeader(ctx context.Context, nc *nats.Conn, stream, subject string) (uint64, error) {
	body, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, answerWait)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, body)
	if err != nil {
		return 0, fmt.Errorf("last message on %s: %w", subject, err)
	}
	var resp struct {
		Message *struct {
			Seq uint64 `json:"seq"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return 0, fmt.Errorf("last message on %s: %w", subject, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return 0, nil // (a stream not found is a 404 too, and an error)
	case resp.Error != nil:
		return 0, fmt.Errorf("last message on %s: %w", subject, resp.Error)
	case resp.Message == nil:
		return 0, fmt.Errorf("last message on %s: an answer without a message", subject)
	}
	return resp.Message.Seq, nil
}

// readBatch is how many messages one direct get of ReadSubject asks for.
const readBatch = 1000

// ReadSubject calls fn with every message on subject in stream (which must
// allow direct gets) from sequence from on, in order, with one request per
// thousand messages, and returns the sequence of the last one (from-1 if
// there was none). On a replicated stream the answering replica may lag the
// leader: what is returned is then a true prefix of the subject, shorter
// than the leader's, so callers that know of a later message check that
// they got that far.
func ReadSubject(ctx context.Context, nc *nats.Conn, stream, subject string, from uint64, fn func(seq uint64, data []byte) error) (uint64, error) {
	last := from - 1
	if from == 0 {
		from, last = 1, 0
	}
	for {
		n, more, err := readSubjectBatch(ctx, nc, stream, subject, last+1, readBatch, func(seq uint64, data []byte) error {
			last = seq
			return fn(seq, data)
		})
		if err != nil {
			return last, err
		}
		if !more || n == 0 {
			return last, nil
		}
	}
}

// ReadRange calls fn with the messages on subject (wildcards allowed) in
// stream whose sequences lie in [from, upTo], in order, and at most limit
// of them.
func ReadRange(ctx context.Context, nc *nats.Conn, stream, subject string, from, upTo uint64, limit int, fn func(seq uint64, data []byte) error) error {
	errPast := errors.New("past the range")
	for from <= upTo && limit > 0 {
		last := from - 1
		n, more, err := readSubjectBatch(ctx, nc, stream, subject, from, min(limit, readBatch), func(seq uint64, data []byte) error {
			if seq > upTo {
				return errPast
			}
			last = seq
			return fn(seq, data)
		})
		if errors.Is(err, errPast) {
			return nil
		}
		if err != nil || !more || n == 0 {
			return err
		}
		from, limit = last+1, limit-n
	}
	return nil
}

// readSubjectBatch reads up to batch messages of subject from sequence
// from; more says whether the server holds further ones.
func readSubjectBatch(ctx context.Context, nc *nats.Conn, stream, subject string, from uint64, batch int, fn func(uint64, []byte) error) (n int, more bool, err error) {
	req := struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj"`
		Batch   int    `json:"batch"`
	}{from, subject, batch}
	pending, err := DirectBatch(ctx, nc, stream, req, func(m *nats.Msg) error {
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return fmt.Errorf("read %s on %s: message without a sequence", subject, stream)
		}
		n++
		return fn(seq, m.Data)
	})
	return n, pending > 0, err
}

// NextMsg reads the first message on subject in stream (which must allow
// direct gets) at or after sequence from: one request on the connection's
// shared reply subscription, so that the frequent answer "none" costs one
// small message. found is false when there is none.
func NextMsg(ctx context.Context, nc *nats.Conn, stream, subject string, from uint64) (seq uint64, data []byte, found bool, err error) {
	body, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj"`
	}{from, subject})
	if err != nil {
		return 0, nil, false, err
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream, body)
	if err != nil {
		return 0, nil, false, fmt.Errorf("direct get on %s: %w", stream, err)
	}
	if status := m.Header.Get("Status"); status != "" {
		if status == "404" {
			return 0, nil, false, nil
		}
		return 0, nil, false, fmt.Errorf("direct get on %s: %s %s", stream, status, m.Header.Get("Description"))
	}
	seq, err = strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil {
		return 0, nil, false, fmt.Errorf("direct get on %s: message without a sequence", stream)
	}
	return seq, m.Data, true, nil
}
