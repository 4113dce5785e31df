package process

import (
	"fmt"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// `jetflow token revoke` killed right after its token.revoked is in the
// log, before the token's record (revoke:appended): the revocation stands.
// The engine's Projector writes the record from the log, and the gateway's
// cache of tokens, which follows the records, refuses the token from then
// on (401); the token is listed revoked. A revocation that landed is never
// undone by a crash.
func TestTokenRevokeCrashPoint(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	s := &system{t: t, addr: testkit.FreeAddr(t), data: t.TempDir(), http: testkit.FreeAddr(t)}
	s.url = "nats://" + s.addr
	s.serve = testkit.StartProc(t, "serve", nil, binary, "serve", "--data", s.data, "--nats-listen", s.addr,
		"--http", s.http, "--auth", "--projector-lag", "300ms")
	s.serve.WaitOutput(t, 30*time.Second, "jetflow is running")
	s.client = testkit.Connect(t, s.url)
	ctx := testkit.Ctx(t)

	tok, err := s.client.CreateToken(ctx, jetflow.TokenSpec{Name: "soon revoked", Namespace: "default", Role: jetflow.RoleReader})
	if err != nil {
		t.Fatal(err)
	}
	list := func() int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.http+"/api/v1/jobs", nil)
		req.Header.Set("Authorization", "Bearer "+tok.Token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		if code := list(); code != http.StatusOK {
			return fmt.Errorf("the new token: %d", code)
		}
		return nil
	})

	if _, sig, out := s.cli([]string{"JETFLOW_CRASH_AT=revoke:appended"}, "token", "revoke", tok.ID); sig != syscall.SIGKILL {
		t.Fatalf("token revoke was not killed at revoke:appended:\n%s", out)
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		if code := list(); code != http.StatusUnauthorized {
			return fmt.Errorf("the token revoked by a killed revoke: %d", code)
		}
		return nil
	})
	ts, err := s.client.Tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ts, func(x *jetflow.TokenInfo) bool { return x.ID == tok.ID })
	if i < 0 || !ts[i].Revoked || ts[i].RevokedAt == nil {
		t.Fatalf("token %s not listed revoked among %d", tok.ID, len(ts))
	}
	s.verify()
}
