package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// A shell job runs in a private directory of its own, so that `bash
// build.sh` would look for build.sh there: resolveCommand makes the
// command find the files of the directory the worker was started in.

// shellWord is a word of a command: where it is in the command, its value
// once unquoted, and whether it is literal (no expansion, glob or
// substitution: its value is what bash would see).
type shellWord struct {
	start, end int
	value      string
	literal    bool
	program    bool // where a command name goes
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// shellWords splits a command into its words, as far as a literal word
// goes: quotes ('…', "…"), backslash escapes, and the operators ; & | ( )
// < > and newlines, which separate words. ok is false for a command it
// cannot read (an unclosed quote): it is then left as it is.
func shellWords(cmd string) (words []shellWord, ok bool) {
	program := true // the next word is a command name
	i := 0
	for i < len(cmd) {
		c := cmd[i]
		switch {
		case c == ' ' || c == '\t':
			i++
			continue
		case strings.IndexByte(";&|()\n", c) >= 0:
			program = true
			i++
			continue
		case c == '<' || c == '>':
			i++
			continue
		}
		w := shellWord{start: i, literal: true, program: program}
		var val strings.Builder
	word:
		for i < len(cmd) {
			c := cmd[i]
			switch {
			case strings.IndexByte(" \t;&|()<>\n", c) >= 0:
				break word
			case c == '\'':
				end := strings.IndexByte(cmd[i+1:], '\'')
				if end < 0 {
					return nil, false
				}
				val.WriteString(cmd[i+1 : i+1+end])
				i += end + 2
			case c == '"':
				end := strings.IndexByte(cmd[i+1:], '"')
				if end < 0 {
					return nil, false
				}
				inner := cmd[i+1 : i+1+end]
				if strings.ContainsAny(inner, "$`\\") {
					w.literal = false
				}
				val.WriteString(inner)
				i += end + 2
			case c == '\\':
				if i+1 >= len(cmd) {
					return nil, false
				}
				val.WriteByte(cmd[i+1])
				i += 2
			default:
				if strings.IndexByte("$`*?[]{}~!#", c) >= 0 {
					w.literal = false
				}
				val.WriteByte(c)
				i++
			}
		}
		w.end, w.value = i, val.String()
		words = append(words, w)
		// An assignment before the command name leaves the name to come.
		program = program && w.literal && assignment.MatchString(w.value)
	}
	return words, true
}

// resolveCommand makes absolute each word of command that is a relative
// path of a regular file in dir: the command name when it has a slash
// (./build.sh, bin/tool; a bare name is looked up in PATH, as bash does)
// and any argument (build.sh in `bash build.sh`), redirections included.
// A word that is not literal ($PWD/run.sh, *.sh) is left alone, and so is
// a file that is not in dir: it is looked for in the job's directory (an
// input file). It returns the command and the words it resolved.
func resolveCommand(command, dir string) (string, []string) {
	words, ok := shellWords(command)
	if !ok {
		return command, nil
	}
	var b strings.Builder
	var resolved []string
	last := 0
	for _, w := range words {
		v := w.value
		if !w.literal || v == "" || filepath.IsAbs(v) || strings.HasPrefix(v, "-") ||
			(w.program && !strings.Contains(v, "/")) || assignment.MatchString(v) {
			continue
		}
		abs := filepath.Join(dir, v)
		if st, err := os.Stat(abs); err != nil || !st.Mode().IsRegular() {
			continue
		}
		b.WriteString(command[last:w.start])
		b.WriteString(shellQuote(abs))
		last = w.end
		resolved = append(resolved, v)
	}
	if resolved == nil {
		return command, nil
	}
	b.WriteString(command[last:])
	return b.String(), resolved
}
