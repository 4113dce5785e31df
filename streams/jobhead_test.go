package streams

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

func jobHeadRecords() []*domain.Job {
	wf := &domain.Workflow{Name: "big"}
	for i := range 2000 {
		s := domain.WorkflowStep{Name: fmt.Sprintf("s%d", i)}
		if i > 0 {
			s.After = []int{i - 1}
		}
		wf.Steps = append(wf.Steps, s)
	}
	return []*domain.Job{
		{ID: "j1", State: domain.StateQueued, Seq: 7, Spec: domain.Spec{Namespace: "default", Queue: "q", Type: "t", Payload: []byte(`{"a":1}`)}},
		{ID: "j2", State: domain.StateCancelled, Seq: 1 << 40, Spec: domain.Spec{Namespace: "n", Queue: "default", Type: "a.b", Tags: []string{"x"}},
			Result: []byte(`"r"`), Error: &domain.JobError{Code: "C", Message: "m"}, CreatedAt: time.Unix(1700000000, 5),
			Fanout: &domain.Fanout{Plan: domain.FanoutPlan{Kind: domain.FanoutBatches, Total: 3}}},
		{ID: "wf", State: domain.StateWaiting, Seq: 300, Spec: domain.Spec{Namespace: "acme", Queue: "default", Type: domain.WorkflowType, Workflow: wf}},
		{ID: "j3", State: domain.StateSucceeded, Seq: 200, Spec: domain.Spec{Type: "t"}},
		{ID: "j4", State: domain.StateRunning, Seq: 70000},
	}
}

// The head of a record is what the whole record says of it.
func TestDecodeJobHead(t *testing.T) {
	for _, j := range jobHeadRecords() {
		b, err := EncodeJob(j)
		if err != nil {
			t.Fatal(err)
		}
		full, err := DecodeJob(b)
		if err != nil {
			t.Fatal(err)
		}
		var fast domain.Job
		if err := scanJobHead(b, &fast); err != nil {
			t.Fatalf("%s: the encoder's form is not read by the scanner: %v", j.ID, err)
		}
		h, err := DecodeJobHead(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.ID != full.ID || h.State != full.State || h.Seq != full.Seq || h.Spec.Namespace != full.Spec.Namespace ||
			h.Spec.Queue != full.Spec.Queue || h.Spec.Type != full.Spec.Type || JobSubject(h) != JobSubject(full) {
			t.Fatalf("head %+v of %+v", h, full)
		}
	}
	for _, bad := range [][]byte{nil, {0x81}, {0x80}, {0x81, 0xa2, 'i', 'd', 0xa1}} {
		if _, err := DecodeJobHead(bad); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%x: %v", bad, err)
		}
	}
}

func BenchmarkDecodeWorkflowRecord(b *testing.B) {
	recs := jobHeadRecords()
	data, err := EncodeJob(recs[2])
	if err != nil {
		b.Fatal(err)
	}
	b.Run("whole", func(b *testing.B) {
		for b.Loop() {
			if _, err := DecodeJob(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("head", func(b *testing.B) {
		for b.Loop() {
			if _, err := DecodeJobHead(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func FuzzDecodeJobHead(f *testing.F) {
	for _, j := range jobHeadRecords()[:2] {
		b, _ := EncodeJob(j)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, general domain.Job
		errFast := scanJobHead(data, &fast)
		if errors.Is(errFast, errHeadForm) {
			return // read by the general decoder
		}
		errGeneral := decodeJobHeadGeneral(data, &general)
		if (errFast == nil) != (errGeneral == nil) {
			t.Fatalf("%x: fast %v, general %v", data, errFast, errGeneral)
		}
		if errFast == nil && (fast.ID != general.ID || fast.State != general.State || fast.Seq != general.Seq ||
			fast.Spec.Namespace != general.Spec.Namespace || fast.Spec.Queue != general.Spec.Queue || fast.Spec.Type != general.Spec.Type) {
			t.Fatalf("%x: fast %+v, general %+v", data, fast, general)
		}
	})
}
