package cmdservice

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetflow/jetflow/engine/internal/natsserver"
	"github.com/jetflow/jetflow/engine/internal/problems"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// A command that panics is answered with an internal error, and the
// server goes on answering. (A store with nothing opened makes get panic.)
func TestCommandServerRecoversPanic(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{Dir: t.TempDir(), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	conn := func() *nats.Conn {
		nc, err := natsserver.ConnectInProcess(srv, t.Name())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	cs := &CommandServer{store: &store.Store{}, nc: conn(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := cs.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Stop(t.Context()) })
	nc := conn()
	ask := func(verb, body string) cmdReply {
		t.Helper()
		m := nats.NewMsg(streams.CommandPrefix + "." + verb)
		m.Data = []byte(body)
		m.Header.Set("Content-Type", "application/json")
		resp, err := nc.RequestMsg(m, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
		var r cmdReply
		if err := json.Unmarshal(resp.Data, &r); err != nil {
			t.Fatalf("%s reply %q: %v", verb, resp.Data, err)
		}
		return r
	}
	for i := range 3 {
		r := ask("get", `{"id":"`+domain.NewID()+`"}`)
		if r.Error == nil || r.Error.Type != problems.Internal || r.Error.Status != 500 || r.Error.Detail == "" {
			t.Fatalf("get %d on a broken store: %+v", i, r.Error)
		}
	}
	if r := ask("explode", `{}`); r.Error == nil || r.Error.Type != problems.UnknownCommand {
		t.Fatalf("unknown verb after panics: %+v", r.Error)
	}
	// the stats of a command are recorded before its reply
	resp, err := nc.Request("$SRV.STATS."+CommandService, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var stats micro.Stats
	if err := json.Unmarshal(resp.Data, &stats); err != nil {
		t.Fatal(err)
	}
	for _, e := range stats.Endpoints {
		if e.Name != "get" {
			continue
		}
		var data VerbStats
		if err := json.Unmarshal(e.Data, &data); err != nil {
			t.Fatal(err)
		}
		if data.NumAnswered != 3 || data.NumErrors != 3 || !strings.HasPrefix(data.LastError, "internal: ") {
			t.Fatalf("get stats %+v", data)
		}
		return
	}
	t.Fatalf("no stats of get: %+v", stats)
}
