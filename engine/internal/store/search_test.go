package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

func TestSearchMatch(t *testing.T) {
	t.Parallel()
	fin := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	j := &domain.Job{ID: "01JD3K2Q4V8ZB7R1X9C0M5T6NA", Spec: domain.Spec{Tags: []string{"vip", "eu"},
		Payload: []byte(`{"customer":42,"name":"Ann","nested":{"id":"x-1","ok":true,"none":null},"items":[{"sku":"A"},{"sku":"B"}]}`)},
		Error: &domain.JobError{Code: "TIMEOUT", Message: "Execution timeout of 1m passed"}, FinishedAt: fin}
	for _, c := range []struct {
		s    Search
		want bool
	}{
		{Search{}, true},
		{Search{ID: "01JD3K"}, true}, {Search{ID: "01JD3L"}, false},
		{Search{Tag: "vip"}, true}, {Search{Tag: "vi"}, false},
		{Search{ErrorCode: "TIMEOUT"}, true}, {Search{ErrorCode: "timeout"}, false},
		{Search{Error: "EXECUTION timeout"}, true}, {Search{Error: "timeo"}, true}, {Search{Error: "panic"}, false},
		{Search{Payload: []string{"customer=42"}}, true}, {Search{Payload: []string{"payload.customer=42.0"}}, true},
		{Search{Payload: []string{"customer=43"}}, false}, {Search{Payload: []string{"name=Ann"}}, true},
		{Search{Payload: []string{"nested.id=x-1", "nested.ok=true", "nested.none=null"}}, true},
		{Search{Payload: []string{"items.1.sku=B"}}, true}, {Search{Payload: []string{"items.2.sku=B"}}, false},
		{Search{Payload: []string{"missing=1"}}, false}, {Search{Payload: []string{"customer=42", "name=Bob"}}, false},
		{Search{FinishedAfter: fin.Add(-time.Hour)}, true}, {Search{FinishedAfter: fin.Add(time.Second)}, false},
		{Search{FinishedBefore: fin}, false}, {Search{FinishedBefore: fin.Add(time.Second), Tag: "eu"}, true},
	} {
		if err := c.s.Validate(); err != nil {
			t.Fatalf("%+v: %v", c.s, err)
		}
		if got := c.s.Match(j); got != c.want {
			t.Errorf("%+v: %v, want %v", c.s, got, c.want)
		}
	}
	if (&Search{FinishedAfter: fin}).Match(&domain.Job{}) {
		t.Error("a job that did not finish matched a finish time")
	}
	for _, c := range []struct {
		s     Search
		field string
	}{
		{Search{Payload: []string{"customer"}}, "payload"}, {Search{Payload: []string{"=1"}}, "payload"},
		{Search{Payload: []string{"a..b=1"}}, "payload"}, {Search{Payload: []string{"a=1", "b=1", "c=1", "d=1", "e=1"}}, "payload"},
		{Search{Payload: []string{"a.b.c.d.e.f.g.h.i=1"}}, "payload"}, {Search{Tag: strings.Repeat("t", 257)}, "tag"},
		{Search{FinishedAfter: fin, FinishedBefore: fin}, "finished_before"},
	} {
		err := c.s.Validate()
		var in *commands.InputError
		if !errors.As(err, &in) || in.Field != c.field {
			t.Errorf("%+v: %v, want a refusal of %s", c.s, err, c.field)
		}
	}
}
