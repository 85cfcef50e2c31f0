package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/tock-sched/tock/server/internal/secretfile"
)

// secrets are the flags whose values must not sit on a command line, where every user
// of the host can read them (ps, /proc/PID/cmdline). Each -NAME has a -NAME-file twin
// that names a file holding the value (read by secretfile.Read: one trailing newline
// dropped), and, as every
// flag, an environment variable (TOCKD_NAME, TOCKD_NAME_FILE).
type secrets struct {
	list []*secret
}

type secret struct {
	name  string
	value *string
	file  string
}

func newSecrets() *secrets { return &secrets{} }

// flag defines -name (into value) and -name-file.
func (s *secrets) flag(fs *flag.FlagSet, value *string, name, usage string) {
	sec := &secret{name: name, value: value}
	s.list = append(s.list, sec)
	fs.StringVar(value, name, "", usage+"; a secret: prefer -"+name+"-file or TOCKD_"+envName(name))
	fs.StringVar(&sec.file, name+"-file", "", "file holding -"+name+" (one trailing newline ignored)")
}

// read loads every -name-file given; a secret set both ways is an error.
func (s *secrets) read() error {
	for _, sec := range s.list {
		if sec.file == "" {
			continue
		}
		if *sec.value != "" {
			return fmt.Errorf("-%s and -%s-file are exclusive", sec.name, sec.name)
		}
		v, err := secretfile.Read(sec.file)
		if err != nil {
			return fmt.Errorf("-%s-file: %w", sec.name, err)
		}
		*sec.value = v
	}
	return nil
}

// envName is a flag's environment variable, less the TOCKD_ prefix.
func envName(flagName string) string {
	return strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}
