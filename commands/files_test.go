package commands_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/domain"

	"github.com/jetflow/jetflow/commands"
)

func TestCheckFileName(t *testing.T) {
	for _, ok := range []string{"run.sh", "a/b/c.txt", "a..b", "..a", "a/.hidden", "données/été.csv", "outdir/x", "out.txt", "tmpfile"} {
		if err := commands.CheckFileName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/a", "../a", "a/../b", "a/..", ".", "./a", "a//b", "a/", "a\x00", "a\tb", `a\b`,
		"out", "out/x", "tmp/x", "payload.json", "inputs.json", "stdout.txt", "stderr.txt", "\xff", strings.Repeat("a", 513)} {
		err := commands.CheckFileName(bad)
		var fe *commands.FileNameError
		if !errors.As(err, &fe) || fe.Name != bad || !errors.Is(err, commands.ErrInvalidFileName) ||
			!errors.Is(err, commands.ErrInvalidInput) || commands.RegistrySlug(err) != "invalid-file-name" {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestCheckFileNames(t *testing.T) {
	if err := commands.CheckFileNames([]string{"a/b", "a/c", "b"}, 3); err != nil {
		t.Error(err)
	}
	for _, names := range [][]string{{"a", "a"}, {"a", "a/b"}, {"a/b", "a"}, {"a/b/c", "a/b"}} {
		if err := commands.CheckFileNames(names, 0); !errors.Is(err, commands.ErrInvalidFileName) {
			t.Errorf("%q: %v", names, err)
		}
	}
	err := commands.CheckFileNames([]string{"a", "b", "c"}, 2)
	var in *commands.InputError
	if !errors.As(err, &in) || in.Field != "files" {
		t.Errorf("3 of 2: %v", err)
	}
}

func TestSubmitRecordsFiles(t *testing.T) {
	good := commands.SubmitRequest{Type: "t", Files: []domain.FileRef{{Name: "a", Size: 1, Digest: "SHA-256=x"}}}
	spec, err := good.Spec(time.Now())
	if err != nil || len(spec.Files) != 1 || spec.Files[0] != good.Files[0] {
		t.Fatalf("spec %+v, %v", spec.Files, err)
	}
	for _, f := range []domain.FileRef{{Name: "../a", Digest: "d"}, {Name: "a", Size: -1, Digest: "d"}, {Name: "a"}} {
		r := commands.SubmitRequest{Type: "t", Files: []domain.FileRef{f}}
		if err := r.Validate(); !errors.Is(err, commands.ErrInvalidInput) {
			t.Errorf("%+v: %v", f, err)
		}
	}
}
