package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/aegis-dev/aegis/events"
)

// initServersFile is where aegis init keeps, in its configuration folder,
// the command each name it gave was set up for.
const initServersFile = "servers.json"

// initServers is what earlier runs of aegis init set up, by name: the
// command each name's record and state folder belong to. A run for the
// same command takes the same name again, so that running init twice
// (or again after --undo) keeps the server's record and state folder
// instead of starting new ones beside them; another command never takes
// a name that one has.
type initServers struct {
	path    string
	servers map[string][]string
	changed bool
}

type initServersJSON struct {
	Servers map[string][]string `json:"servers"`
}

// loadInitServers reads the file of configDir; there being none is an
// empty one.
func loadInitServers(configDir string) (*initServers, error) {
	r := &initServers{path: filepath.Join(configDir, initServersFile), servers: map[string][]string{}}
	b, err := os.ReadFile(r.path)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	var f initServersJSON
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, withHint(fmt.Errorf("init: %s is not what aegis init writes: %w", r.path, err),
			"move it away: it only lets a server set up again keep its name (a server then set up again gets a new one)")
	}
	for n, argv := range f.Servers {
		if len(argv) > 0 {
			r.servers[n] = argv
		}
	}
	return r, nil
}

// name returns base, or base-2, base-3…: the first that was set up for
// argv before (again is then true), or else the first that neither was
// set up for another command nor is taken. A name in given (those this
// run gave already) is neither.
func (r *initServers) name(base string, argv []string, given map[string]bool, taken func(string) bool) (name string, again bool) {
	name = uniqueName(base, func(n string) bool {
		if given[n] {
			return true
		}
		if prev, ok := r.servers[n]; ok {
			again = slices.Equal(prev, argv)
			return !again
		}
		return taken(n)
	})
	return name, again
}

// add notes that name was set up for argv.
func (r *initServers) add(name string, argv []string) {
	if slices.Equal(r.servers[name], argv) {
		return
	}
	r.servers[name] = slices.Clone(argv)
	r.changed = true
}

// save writes the file if add changed it.
func (r *initServers) save() error {
	if !r.changed {
		return nil
	}
	b, err := json.MarshalIndent(initServersJSON{Servers: r.servers}, "", "  ")
	if err != nil {
		return err
	}
	return events.WriteFileAtomicMode(r.path, append(b, '\n'), 0o600)
}
