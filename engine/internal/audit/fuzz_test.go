package audit_test

import (
	"bytes"
	"testing"

	"github.com/jetflow/jetflow/engine/internal/audit"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// An export read back, and events fed to a verifier, are input from
// outside: any bytes give a report or an error, never a panic.
func FuzzVerifyExport(f *testing.F) {
	ev, _ := streams.EncodeEvent(&domain.Event{Type: domain.EvSubmitted, JobID: "x"})
	f.Add([]byte(`{"kind":"header","v":1,"seq":1}`+"\n"+`{"kind":"event","seq":1,"subject":"jetflow.ev.a.b.c.x","hash":"AAAA","data":"gA=="}`), ev)
	f.Add([]byte(`{"kind":"proof","checkpoint":3,"path":[{"left":true,"hash":"AAAA"}]}`), []byte{0x80})
	f.Add([]byte(`{"kind":"checkpoint","seq":2,"data":"gA=="}`), []byte{0xc1})
	const pub = "NAK3VYB4VZRQ2IFOI3E4ZAPW7IJSYY5LQ5KU3YEZRAEOYCOOXOCFNRDT"
	f.Fuzz(func(t *testing.T, file, data []byte) {
		_, _ = audit.VerifyExport(bytes.NewReader(file), pub)
		v := audit.NewVerifier(pub, true)
		v.Add(1, streams.CheckpointSubject, nil, data)
		v.Add(2, "jetflow.ev.a.b.c.x", streams.ChainHash(nil, data), data)
		v.Add(3, "jetflow.ev.a.b.c.x", data, data)
		_ = v.Finish()
	})
}
