package engine_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// TestTokenRepairedFromTheLog: a token whose creator crashed between its
// event and its record is written by the projector from the log, and a
// gateway that is shown it before that reads it from the log; a revoke
// whose record was lost the same way is seen too.
func TestTokenRepairedFromTheLog(t *testing.T) {
	h := newHarness(t)
	id, tok, hash, err := commands.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	ev, err := commands.CreateToken(id, hash, commands.TokenSpec{Name: "crashed", Namespace: "acme", Role: commands.RoleReader}, "test", time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (streams.Writer{JS: h.st.JS}).AppendAsync(streams.TokenSubject(id), ev, 0).Wait(h.ctx); err != nil {
		t.Fatal(err)
	}
	reader := testkit.Store(t, testkit.Conn(t, h.srv), "reader")
	p, err := reader.Tokens.Verify(h.ctx, tok)
	if err != nil || p.Name != "crashed" || p.Namespace != "acme" {
		t.Fatalf("verify a token only the log has: %+v %v", p, err)
	}
	kv, err := h.st.JS.KeyValue(h.ctx, streams.TokensBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(h.ctx, id); err != nil {
		t.Fatalf("the record was not written back: %v", err)
	}
	// The revoke's event, without its record: the projector brings the
	// record up to it, and every watcher refuses the token.
	cur, err := reader.Tokens.List(h.ctx)
	if err != nil || len(cur) != 1 {
		t.Fatal(err)
	}
	rev, err := commands.RevokeToken(cur[0], id, "test", time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (streams.Writer{JS: h.st.JS}).AppendAsync(streams.TokenSubject(id), rev, cur[0].Seq).Wait(h.ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		if _, err := reader.Tokens.Verify(h.ctx, tok); !errors.Is(err, commands.ErrUnauthenticated) {
			return fmt.Errorf("the revoked token still verifies: %v", err)
		}
		return nil
	})
}
