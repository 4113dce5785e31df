package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// durationValue is every duration flag: a number of seconds (5, 0.5) or a
// Go duration (5s, 1m30s), as the HTTP API takes them. A negative or
// malformed value is refused when it is set.
type durationValue time.Duration

// durationVar defines a duration flag (flag.FlagSet.DurationVar's shape).
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

func (d *durationValue) String() string { return time.Duration(*d).String() }
func (d *durationValue) Get() any       { return time.Duration(*d) }

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// errDurationSyntax is the reason a duration flag's value is refused.
var errDurationSyntax = errors.New("want a duration: 5 (seconds), 0.5, 5s, 1m30s")

// parseDuration parses a duration flag's value: seconds, or a Go duration;
// not negative.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(f) || math.IsInf(f, 0) || strings.ContainsAny(s, "xXpP_") {
			return 0, errDurationSyntax
		}
		if math.Abs(f) > float64(math.MaxInt64)/float64(time.Second) {
			return 0, errors.New("out of range")
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d < 0 || strings.HasPrefix(s, "-") {
		return 0, errors.New("must not be negative")
	}
	return d, nil
}

// globalFlags are accepted before the command as well as after it
// (`jetflow --json ls`): each takes a value, but --json.
var globalFlags = map[string]bool{"json": false, "nats": true, "namespace": true, "token": true,
	"nats-creds": true, "nats-user": true, "nats-password": true, "nats-token": true}

// splitFlag splits "-name=value" or "--name" into name, value and whether
// a value was given with "=". ok is false for what is not a flag: a
// positional argument ("-" alone and negative numbers included).
func splitFlag(a string) (name, value string, hasValue, ok bool) {
	if len(a) < 2 || a[0] != '-' || isNumber(a) {
		return "", "", false, false
	}
	name = strings.TrimPrefix(a[1:], "-")
	name, value, hasValue = strings.Cut(name, "=")
	return name, value, hasValue, true
}

// isNumber reports whether a looks like a negative number (a payload
// such as -1), not a flag.
func isNumber(a string) bool {
	_, err := strconv.ParseFloat(a, 64)
	return err == nil
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// jsonFlag reports whether args ask for JSON (--json before a "--").
func jsonFlag(args []string) bool {
	on := false
	for _, a := range args {
		if a == "--" {
			break
		}
		if name, v, has, ok := splitFlag(a); ok && name == "json" {
			on = !has || v == "true" || v == "1"
		}
	}
	return on
}

// wantsHelp reports whether args ask for help (-h, -help or --help before
// a "--").
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

// parseFlags sets the flags of args, which may come before, between or
// after the positional arguments, and returns the positional ones. An
// unknown flag, a flag without its value and a value its flag refuses are
// reported naming the flag. -h and --help print the command's help
// (c.helped).
func (c *cli) parseFlags(args []string) ([]string, bool) {
	// --json first: an error before it is reached is printed as JSON too.
	c.json = c.fs.Lookup("json") != nil && jsonFlag(args)
	if wantsHelp(args) {
		c.printHelp()
		c.helped = true
		return nil, false
	}
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		name, value, hasValue, ok := splitFlag(a)
		if !ok {
			pos = append(pos, a)
			continue
		}
		f := c.fs.Lookup(name)
		if f == nil || name == "" || strings.HasPrefix(name, "-") {
			c.unknownFlag(a)
			return nil, false
		}
		if !hasValue {
			if isBoolFlag(f) {
				value = "true"
			} else {
				if i+1 >= len(args) || c.isFlagOf(args[i+1]) {
					c.reportAs(problemInput("--"+name), "--%s: needs a value", name)
					return nil, false
				}
				i++
				value = args[i]
			}
		}
		if err := c.fs.Set(name, value); err != nil {
			c.refuseFlag(name, quoteIfString(f, value), valueReason(f, value, err))
			return nil, false
		}
	}
	return pos, true
}

// isFlagOf reports whether a is one of the command's flags (not a value).
func (c *cli) isFlagOf(a string) bool {
	name, _, _, ok := splitFlag(a)
	return ok && c.fs.Lookup(name) != nil
}

// quoteIfString is how a refused value is shown: quoted if the flag is a
// string's, as refuseFlag shows one.
func quoteIfString(f *flag.Flag, v string) string {
	if g, ok := f.Value.(flag.Getter); ok {
		if _, isString := g.Get().(string); isString {
			return strconv.Quote(v)
		}
	}
	if v == "" {
		return `""`
	}
	return v
}

// valueReason says why a flag refused a value: what it wants.
func valueReason(f *flag.Flag, value string, err error) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err.Error()
	}
	switch g.Get().(type) {
	case bool:
		return "want true or false"
	case int, int64, uint, uint64:
		if _, perr := strconv.ParseInt(value, 0, 64); errors.Is(perr, strconv.ErrRange) {
			return "out of range"
		}
		return "want a whole number"
	case float64:
		return "want a number"
	}
	return err.Error()
}

// unknownFlag reports a flag the command does not have, with the one it
// may have meant.
func (c *cli) unknownFlag(arg string) {
	name, _, _, _ := splitFlag(arg)
	var names []string
	c.fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	msg := fmt.Sprintf("unknown flag --%s for jetflow %s", name, c.name)
	if s := suggest(name, names); s != "" {
		msg += "; did you mean --" + s + "?"
	} else {
		msg += fmt.Sprintf(" (jetflow %s --help lists its flags)", c.name)
	}
	// The message names the command: no "jetflow CMD:" before it.
	cmd := c.name
	c.name = ""
	c.reportAs(problemUsage("--"+name), "%s", msg)
	c.name = cmd
}

// suggest returns the candidate closest to s, if one is close enough to
// be what was meant: a typo (an edit or two, a swap of neighbours), or s
// a word of it (retries of max-retries). "" if none is.
func suggest(s string, candidates []string) string {
	best, bestD := "", math.MaxInt
	for _, c := range candidates {
		d := editDistance(s, c)
		close := d <= max(1, len(s)/3)
		if !close && len(s) >= 3 {
			for _, part := range strings.FieldsFunc(c, func(r rune) bool { return r == '-' || r == '.' || r == ':' }) {
				if part == s {
					close = true
				}
			}
			close = close || (len(s) >= 4 && (strings.HasPrefix(c, s) || strings.Contains(c, s)))
		}
		if close && (d < bestD || (d == bestD && c < best)) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and swaps of neighbours.
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}

// hoistGlobals moves the global flags given before the command to after
// it: `jetflow --json ls` is `jetflow ls --json`. It returns the command
// and its arguments, or an error naming a flag that is not global.
func hoistGlobals(args []string) (cmd string, rest []string, err error) {
	var lead []string
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return "", nil, errors.New("want a command before --")
		}
		name, _, hasValue, ok := splitFlag(a)
		if !ok {
			break
		}
		takesValue, global := globalFlags[name]
		if !global {
			names := make([]string, 0, len(globalFlags))
			for n := range globalFlags {
				names = append(names, n)
			}
			slices.Sort(names)
			msg := fmt.Sprintf("unknown flag --%s before the command", name)
			if s := suggest(name, names); s != "" {
				msg += "; did you mean --" + s + "?"
			} else {
				msg += " (before it only the global flags: --" + strings.Join(names, ", --") + ")"
			}
			return "", nil, errors.New(msg)
		}
		lead = append(lead, a)
		if takesValue && !hasValue {
			if i+1 >= len(args) {
				return "", nil, fmt.Errorf("--%s needs a value", name)
			}
			i++
			lead = append(lead, args[i])
		}
	}
	if i == len(args) {
		return "", lead, nil
	}
	return args[i], append(lead, args[i+1:]...), nil
}

// subcommand finds the subcommand of args (the first argument that is not
// a flag, or a global flag's value) and returns it with the other
// arguments. "" if there is none.
func subcommand(args []string) (sub string, rest []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if name, _, hasValue, ok := splitFlag(a); ok {
			if globalFlags[name] && !hasValue {
				i++
			}
			continue
		}
		return a, append(slices.Clone(args[:i]), args[i+1:]...)
	}
	return "", args
}
