package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// The export's progress reads the seq of each event line, however the
// export is cut into writes, and draws how far through the log it is;
// without the log's range it tells the bytes.
func TestExportProgress(t *testing.T) {
	var export bytes.Buffer
	export.WriteString(`{"kind":"header","v":1,"seq":1}` + "\n")
	for seq := 1; seq <= 200; seq++ {
		fmt.Fprintf(&export, `{"kind":"event","seq":%d,"subject":"jetflow.ev.a.b.c.d","data":"%s"}`+"\n", seq, strings.Repeat("x", seq%97))
	}
	export.WriteString(`{"kind":"checkpoint","seq":201,"data":"zz"}` + "\n")
	for _, piece := range []int{1, 7, 64, 4096} {
		var out, errw bytes.Buffer
		p := &progressWriter{w: &out, errw: &errw, first: 1, last: 201, atStart: true}
		b := export.Bytes()
		for len(b) > 0 {
			k := min(piece, len(b))
			if _, err := p.Write(b[:k]); err != nil {
				t.Fatal(err)
			}
			b = b[k:]
		}
		p.done()
		if !bytes.Equal(out.Bytes(), export.Bytes()) || p.seq != 200 {
			t.Fatalf("writes of %d: %d bytes through, last event %d", piece, out.Len(), p.seq)
		}
		if last := errw.String()[strings.LastIndex(errw.String(), "\r"):]; !strings.HasPrefix(last, "\r[###################.]  99.5% of the log (event 200 of 1..201)") {
			t.Fatalf("writes of %d: %q", piece, last)
		}
	}
	var errw bytes.Buffer
	p := &progressWriter{w: &bytes.Buffer{}, errw: &errw, atStart: true}
	p.Write(export.Bytes())
	p.done()
	if !strings.HasSuffix(errw.String(), "\rexported 0.0 MiB\n") {
		t.Fatalf("without the range: %q", errw.String())
	}
}
