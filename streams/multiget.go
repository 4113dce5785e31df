package streams

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// maxMultiLast is the server's cap on subjects answered by one multi_last
// direct get (more makes it answer 413 Too Many Results).
const maxMultiLast = 1000

// LastMsg is the last message on one subject, as a multi-last get returns it.
type LastMsg struct {
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
func MultiLast(ctx context.Context, nc *nats.Conn, stream string, subjects []string) (map[string]LastMsg, error) {
	out := make(map[string]LastMsg, len(subjects))
	for len(subjects) > 0 {
		n := min(len(subjects), maxMultiLast)
		if err := multiLast(ctx, nc, stream, subjects[:n], out); err != nil {
			return nil, err
		}
		subjects = subjects[n:]
	}
	return out, nil
}

func multiLast(ctx context.Context, nc *nats.Conn, stream string, subjects []string, out map[string]LastMsg) error {
	req, err := json.Marshal(struct {
		MultiLast []string `json:"multi_last"`
		Batch     int      `json:"batch"`
	}{subjects, len(subjects)})
	if err != nil {
		return err
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, req); err != nil {
		return err
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return fmt.Errorf("multi-last get on %s: %w", stream, err)
		}
		if status := m.Header.Get("Status"); status != "" {
			switch status {
			case "204": // end of batch
				return nil
			case "404": // nothing matched
				return nil
			default:
				return fmt.Errorf("multi-last get on %s: %s %s", stream, status, m.Header.Get("Description"))
			}
		}
		seq, _ := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		subj := m.Header.Get("Nats-Subject")
		op := m.Header.Get("KV-Operation")
		out[subj] = LastMsg{Subject: subj, Seq: seq, Data: m.Data, Deleted: op == "DEL" || op == "PURGE"}
	}
}
