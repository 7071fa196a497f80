// Package docs holds aegis's reference pages, the Markdown files of this
// folder, embedded so that aegis help TOPIC prints them to a user who has
// only the binary. Invariant: every page of this folder is embedded, and
// each is reachable as a help topic named after its file (lowercased,
// without .md); the command line's tests check both.
package docs

import "embed"

// Pages are the reference pages, by file name.
//
//go:embed *.md
var Pages embed.FS
