package jetflow_test

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// Pages of List after a job's Cursor give every job once, newest first, for
// the engine's client and a token's alike, with jobs of idempotency keys
// (whose ids do not sort by time) among them; a bad cursor is refused.
func TestListBeforeCursor(t *testing.T) {
	t.Parallel()
	srv, ctx, admin := startEngine(t)
	for i := range 11 {
		var opts []jetflow.SubmitOption
		if i%3 == 0 {
			opts = append(opts, jetflow.IdempotencyKey(fmt.Sprintf("k-%d", i)))
		}
		if _, err := admin.Submit(ctx, "page.park", i, append(opts, jetflow.Namespace("acme"))...); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := admin.CreateToken(ctx, jetflow.TokenSpec{Name: "r", Namespace: "acme", Role: jetflow.RoleReader})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Token: tok.Token})
	if err != nil {
		t.Fatal(err)
	}
	all, err := admin.List(ctx, jetflow.ListFilter{Namespace: "acme"})
	if err != nil || len(all) != 11 {
		t.Fatalf("list: %d %v", len(all), err)
	}
	want := ids(all)
	if slices.IsSortedFunc(want, func(a, b string) int { return -cmp.Compare(a, b) }) {
		t.Fatalf("newest first is id order: the keyed ids prove nothing: %v", want)
	}
	for name, cl := range map[string]*jetflow.Client{"direct": admin, "token": reader} {
		for _, limit := range []int{1, 4, 11, 0} {
			var got []string
			before := ""
			for page := 0; ; page++ {
				if page > 12 {
					t.Fatalf("%s limit %d: no end", name, limit)
				}
				jobs, err := cl.List(ctx, jetflow.ListFilter{Namespace: "acme", Limit: limit, Before: before})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if len(jobs) == 0 {
					break
				}
				if limit > 0 && len(jobs) > limit {
					t.Fatalf("%s: %d jobs on a page of %d", name, len(jobs), limit)
				}
				got = append(got, ids(jobs)...)
				before = jobs[len(jobs)-1].Cursor()
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s limit %d: pages\n%v\nwant\n%v", name, limit, got, want)
			}
		}
	}
	for _, bad := range []string{"nope", all[0].ID, all[0].ID + ".!"} {
		_, err := admin.List(ctx, jetflow.ListFilter{Before: bad})
		var in *jetflow.InputError
		if !errors.As(err, &in) || in.Field != "before" {
			t.Fatalf("before %q: %v", bad, err)
		}
		if err := (jetflow.ListFilter{Before: bad}).Validate(); !errors.Is(err, jetflow.ErrInvalidInput) {
			t.Fatalf("validate before %q: %v", bad, err)
		}
	}
}

func ids(jobs []*jetflow.JobInfo) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}
