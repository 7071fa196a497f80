package main

import (
	"errors"
	"strings"
	"testing"
)

// Where Landlock and seccomp do not exist, a server asked to run confined
// does not run at all: aegis refuses with what to do, never running it
// unconfined.
func TestConfineRefusedOffLinux(t *testing.T) {
	if err := confineSupported("linux", "--confine"); err != nil {
		t.Fatalf("linux: %v", err)
	}
	for _, goos := range []string{"darwin", "windows", "freebsd"} {
		err := confineSupported(goos, "--confine")
		var he *hintError
		if err == nil || !errors.As(err, &he) || !strings.Contains(err.Error(), "--confine needs Linux") || !strings.Contains(err.Error(), goos) || !strings.Contains(he.hint, "run without it") {
			t.Errorf("%s: %v", goos, err)
		}
	}
}
