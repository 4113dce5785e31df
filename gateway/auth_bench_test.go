package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/testkit"
)

// BenchmarkGetJobAuth is what access control costs a request: GET of one
// job without it, and with a namespaced token (its check: a parse, a
// SHA-256, a cache lookup; and the job's namespace from the index).
//
//	go test -run '^$' -bench GetJobAuth -benchtime 20000x ./gateway/
func BenchmarkGetJobAuth(b *testing.B) {
	for _, auth := range []bool{false, true} {
		name := "off"
		if auth {
			name = "token"
		}
		b.Run(name, func(b *testing.B) {
			ctx := testkit.Ctx(b)
			g, st := benchGateway(b, auth)
			res, err := st.Submit(ctx, &commands.SubmitRequest{Type: "b.get", Namespace: "acme", Payload: commands.RawJSON(`{}`)})
			if err != nil {
				b.Fatal(err)
			}
			_, tok, err := st.Tokens.Create(ctx, commands.TokenSpec{Name: "b", Namespace: "acme", Role: commands.RoleReader}, "bench")
			if err != nil {
				b.Fatal(err)
			}
			<-g.index.Synced()
			g.index.Put(res.Job, res.Rev)
			path := "/api/v1/jobs/" + res.Job.ID
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := httptest.NewRequest(http.MethodGet, path, nil)
					if auth {
						req.Header.Set("Authorization", "Bearer "+tok)
					}
					rec := httptest.NewRecorder()
					g.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("%d %s", rec.Code, rec.Body)
					}
				}
			})
		})
	}
}

// BenchmarkGetJobNotSeen is a namespaced token's GET of another
// namespace's job and of an id that does not exist: both answer the same
// 404, and should take about as long, or the time tells one from the
// other.
//
//	go test -run '^$' -bench GetJobNotSeen -benchtime 5000x ./gateway/
func BenchmarkGetJobNotSeen(b *testing.B) {
	ctx := testkit.Ctx(b)
	g, st := benchGateway(b, true)
	_, tok, err := st.Tokens.Create(ctx, commands.TokenSpec{Name: "b", Namespace: "acme", Role: commands.RoleReader}, "bench")
	if err != nil {
		b.Fatal(err)
	}
	<-g.index.Synced()
	for _, state := range []string{"queued", "cancelled"} {
		res, err := st.Submit(ctx, &commands.SubmitRequest{Type: "b.get", Namespace: "other", Payload: commands.RawJSON(`{}`)})
		if err != nil {
			b.Fatal(err)
		}
		snap := res.Snapshot
		if state == "cancelled" {
			if snap, err = st.Cancel(ctx, res.Job.ID, "bench"); err != nil {
				b.Fatal(err)
			}
		}
		g.index.Put(snap.Job, snap.Rev)
		b.Run("other-"+state, func(b *testing.B) { getNotFound(b, g, tok, res.Job.ID) })
	}
	b.Run("unknown", func(b *testing.B) { getNotFound(b, g, tok, "01M85MKVAX5K4A16TR1GJCD5RN") })
}

func getNotFound(b *testing.B, g *Gateway, tok, id string) {
	for b.Loop() {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/jobs/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotFound {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}

// benchGateway is a started gateway on a server of its own, with access
// control on or off, and the store under its client.
func benchGateway(b *testing.B, auth bool) (*Gateway, *engine.Store) {
	cl := testkit.Client(b, testkit.Conn(b, testkit.Server(b)), "gateway")
	g, err := New(Config{Client: cl, Auth: auth, Log: testkit.Logger(b)})
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Start(testkit.Ctx(b)); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Stop(context.Background()) })
	return g, testkit.StoreOf(b, cl)
}
