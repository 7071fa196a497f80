package main

import "testing"

// On Windows HOME is seldom set: the state directory, the key and the
// caches go under the user's profile instead of failing for want of HOME,
// and a HOME that is set (Git Bash, MSYS) is kept. Elsewhere nothing
// changes.
func TestHomeOnWindows(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	profile := map[string]string{"USERPROFILE": `C:\Users\alice`}
	if got := homeOnWindows("windows", env(profile))("HOME"); got != `C:\Users\alice` {
		t.Errorf("windows without HOME: %q", got)
	}
	set := map[string]string{"USERPROFILE": `C:\Users\alice`, "HOME": `/c/Users/alice`}
	if got := homeOnWindows("windows", env(set))("HOME"); got != `/c/Users/alice` {
		t.Errorf("windows with HOME: %q", got)
	}
	if got := homeOnWindows("windows", env(profile))("USERPROFILE"); got != `C:\Users\alice` {
		t.Errorf("other variables: %q", got)
	}
	if got := homeOnWindows("linux", env(profile))("HOME"); got != "" {
		t.Errorf("linux without HOME: %q, want it left unset", got)
	}
}
