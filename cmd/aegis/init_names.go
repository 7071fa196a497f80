package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// interpreters are commands that run something else: a server is never
// named after one of them, but after what it runs.
var interpreters = map[string]bool{
	"node": true, "nodejs": true, "bun": true, "deno": true, "tsx": true, "ts-node": true,
	"npx": true, "bunx": true, "pnpm": true, "pnpx": true, "yarn": true, "npm": true,
	"python": true, "python3": true, "py": true, "uv": true, "uvx": true, "pipx": true, "poetry": true,
	"docker": true, "podman": true, "nerdctl": true,
	"sh": true, "bash": true, "zsh": true, "env": true, "java": true, "ruby": true, "php": true, "go": true,
	"cmd": true, "powershell": true, "pwsh": true,
}

// genericStems are script names that say nothing of the server (index.js,
// main.py): the directory is named instead.
var genericStems = map[string]bool{
	"index": true, "main": true, "server": true, "cli": true, "app": true, "__main__": true, "mcp": true, "run": true, "start": true,
}

// buildDirs are directories that hold a package's built code: the name is
// the package's, one directory up.
var buildDirs = map[string]bool{
	"dist": true, "build": true, "lib": true, "src": true, "out": true, "bin": true, "target": true, "release": true,
}

// containerValueFlags are the flags of docker/podman run that take the
// next argument as their value.
var containerValueFlags = map[string]bool{
	"-e": true, "--env": true, "--env-file": true, "-v": true, "--volume": true, "-p": true, "--publish": true,
	"--name": true, "--network": true, "--net": true, "--mount": true, "-w": true, "--workdir": true, "-u": true,
	"--user": true, "--entrypoint": true, "-l": true, "--label": true, "--platform": true, "--pull": true,
	"--cpus": true, "-m": true, "--memory": true, "--add-host": true, "--device": true, "--cap-add": true,
	"--cap-drop": true, "--security-opt": true, "--tmpfs": true, "--ulimit": true, "-h": true, "--hostname": true,
	"--dns": true, "--runtime": true, "--gpus": true, "--ipc": true, "--pid": true, "--userns": true,
	"--log-driver": true, "--log-opt": true, "--restart": true, "--stop-signal": true, "--shm-size": true,
}

// commandBase is the name of a command without its directory or a
// Windows executable's extension, lowercase.
func commandBase(cmd string) string {
	b := strings.ToLower(filepath.Base(strings.ReplaceAll(cmd, `\`, "/")))
	for _, ext := range []string{".exe", ".cmd", ".bat"} {
		b = strings.TrimSuffix(b, ext)
	}
	return b
}

// isPython reports whether base names a Python interpreter (python,
// python3, python3.12).
func isPython(base string) bool {
	return base == "python" || base == "py" || strings.HasPrefix(base, "python3") || strings.HasPrefix(base, "python2")
}

// defaultServerName names a server after what the user would call it: the
// npm package npx runs, the Python package uvx runs or the module
// python -m runs, the script node or python runs (its directory when the
// file is an index.js or main.py), the image docker runs; never after the
// interpreter. The name is sanitized to [a-z0-9_-] (see sanitizeName).
func defaultServerName(argv []string) string {
	return sanitizeName(rawServerName(argv))
}

// rawServerName is defaultServerName before sanitizing.
func rawServerName(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	base := commandBase(argv[0])
	args := argv[1:]
	switch {
	case base == "npx" || base == "bunx" || base == "pnpx":
		return packageName(npxPackage(args))
	case (base == "pnpm" || base == "yarn" || base == "npm") && len(args) > 0 && (args[0] == "dlx" || args[0] == "exec"):
		return packageName(npxPackage(args[1:]))
	case base == "uvx" || (base == "pipx" && len(args) > 0 && args[0] == "run"):
		if base == "pipx" {
			args = args[1:]
		}
		return pythonPackage(firstOperand(args, map[string]bool{"--from": true, "--with": true, "--python": true, "-p": true, "--index-url": true}))
	case base == "uv" && len(args) > 0 && args[0] == "run":
		return pythonArgs(args[1:], map[string]bool{"--with": true, "--python": true, "-p": true, "--directory": true, "--project": true, "--from": true})
	case isPython(base):
		return pythonArgs(args, map[string]bool{"-W": true, "-X": true})
	case base == "node" || base == "nodejs" || base == "bun" || base == "tsx" || base == "ts-node":
		a := firstOperand(args, map[string]bool{"-r": true, "--require": true, "--import": true, "--loader": true})
		if a == "run" && base == "bun" {
			a = firstOperand(args[1:], nil)
		}
		return scriptName(a)
	case base == "deno":
		if len(args) > 0 && args[0] == "run" {
			args = args[1:]
		}
		a := firstOperand(args, map[string]bool{"--config": true, "-c": true, "--import-map": true})
		if strings.HasPrefix(a, "npm:") || strings.HasPrefix(a, "jsr:") {
			return packageName(a[4:])
		}
		return scriptName(a)
	case base == "docker" || base == "podman" || base == "nerdctl":
		for i := 0; i < len(args); i++ {
			if args[i] == "run" {
				return imageName(firstOperand(args[i+1:], containerValueFlags))
			}
		}
		return ""
	case base == "cmd" || base == "sh" || base == "bash" || base == "zsh" || base == "env":
		// cmd /c npx …, sh -c "npx …", env A=b npx …: what they run.
		for i, a := range args {
			switch {
			case strings.EqualFold(a, "/c") || a == "-c":
				if i+1 < len(args) {
					words := strings.Fields(strings.Join(args[i+1:], " "))
					if len(words) > 0 && words[0] == "exec" {
						words = words[1:]
					}
					return rawServerName(words)
				}
				return ""
			case base == "env" && (strings.HasPrefix(a, "-") || strings.Contains(a, "=")):
				continue
			case base == "env":
				return rawServerName(args[i:])
			}
		}
		return scriptName(firstOperand(args, nil))
	case interpreters[base]:
		return scriptName(firstOperand(args, nil))
	}
	// A script or binary of its own: its name, or its directory's when
	// the name says nothing.
	return scriptName(argv[0])
}

// firstOperand returns the first argument that is not a flag nor the value
// of one of valueFlags.
func firstOperand(args []string, valueFlags map[string]bool) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				return args[i+1]
			}
			return ""
		}
		if strings.HasPrefix(a, "-") {
			if valueFlags[a] {
				i++
			}
			continue
		}
		return a
	}
	return ""
}

// npxPackage is the package npx runs: --package's, else the first operand.
func npxPackage(args []string) string {
	for i, a := range args {
		if (a == "-p" || a == "--package") && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--package="); ok {
			return v
		}
	}
	return firstOperand(args, map[string]bool{"--registry": true, "--cache": true, "--userconfig": true})
}

// packageName is an npm package specifier's name without scope and
// version: @scope/server-foo@1.2 is server-foo.
func packageName(spec string) string {
	if strings.HasPrefix(spec, "@") {
		if i := strings.IndexByte(spec, '/'); i >= 0 {
			spec = spec[i+1:]
		}
	}
	if i := strings.IndexByte(spec, '@'); i > 0 {
		spec = spec[:i]
	}
	if i := strings.LastIndexByte(spec, '/'); i >= 0 { // a git or file specifier
		spec = strings.TrimSuffix(spec[i+1:], ".git")
	}
	return spec
}

// pythonPackage is a Python requirement's name: mcp-server-git==1.0[x]
// and mcp-server-git@1.0 are mcp-server-git.
func pythonPackage(spec string) string {
	if i := strings.IndexAny(spec, "=<>~![@ ;"); i > 0 {
		spec = spec[:i]
	}
	return spec
}

// pythonArgs names what python runs: the module of -m, else the script.
func pythonArgs(args []string, valueFlags map[string]bool) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-m" && i+1 < len(args):
			return args[i+1]
		case strings.HasPrefix(a, "-m") && len(a) > 2:
			return a[2:]
		case a == "-c":
			return ""
		case a == "--":
			if i+1 < len(args) {
				return scriptName(args[i+1])
			}
			return ""
		case strings.HasPrefix(a, "-"):
			if valueFlags[a] {
				i++
			}
		default:
			if isPython(commandBase(a)) { // uv run python -m x
				return pythonArgs(args[i+1:], nil)
			}
			return scriptName(a)
		}
	}
	return ""
}

// scriptName names a script by its file's stem, or by its directory when
// the stem says nothing (index.js, main.py), going past a build directory
// (…/server-filesystem/dist/index.js is server-filesystem).
func scriptName(path string) string {
	if path == "" {
		return ""
	}
	path = strings.ReplaceAll(path, `\`, "/")
	dir, file := filepath.Split(filepath.Clean(path))
	stem := strings.TrimSuffix(file, filepath.Ext(file))
	if !genericStems[strings.ToLower(stem)] && !interpreters[strings.ToLower(stem)] {
		return stem
	}
	for dir = filepath.Clean(dir); dir != "." && dir != "/" && dir != ""; dir = filepath.Dir(dir) {
		d := filepath.Base(dir)
		if !buildDirs[strings.ToLower(d)] && !genericStems[strings.ToLower(d)] {
			return d
		}
	}
	return stem
}

// imageName names a container image by its last path element, without
// tag or digest: ghcr.io/org/img:tag is img.
func imageName(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, '/'); i >= 0 {
		ref = ref[i+1:]
	}
	if i := strings.IndexByte(ref, ':'); i >= 0 {
		ref = ref[:i]
	}
	return ref
}

var (
	nameRuns     = regexp.MustCompile(`[^a-z0-9_-]+`)
	nameDoubleUS = regexp.MustCompile(`__+`)
)

// sanitizeName makes s a name a state directory, a record file and a
// gateway server can all have: [a-z0-9_-], starting with a letter or
// digit, without "__" or a final "_", at most 48 bytes (so that a suffix
// such as -2 still fits), and not "aegis". What is left of nothing is
// "server".
func sanitizeName(s string) string {
	s = nameRuns.ReplaceAllString(strings.ToLower(s), "-")
	s = nameDoubleUS.ReplaceAllString(s, "_")
	if len(s) > 48 {
		s = s[:48]
	}
	s = strings.Trim(s, "-_")
	if s == "" || interpreters[s] {
		return "server"
	}
	if s == "aegis" {
		return "aegis-server"
	}
	return s
}

// uniqueName returns base, or base-2, base-3… the first that taken
// refuses.
func uniqueName(base string, taken func(string) bool) string {
	n := base
	for i := 2; taken(n); i++ {
		n = base + "-" + strconv.Itoa(i)
	}
	return n
}

// nameTaken reports whether a server of this set-up already uses name:
// its state folder or its record exists, or its name is in used.
func (p *initPlan) nameTaken(used map[string]bool) func(string) bool {
	return func(n string) bool {
		if used[n] {
			return true
		}
		for _, f := range []string{filepath.Join(p.stateRoot, n), filepath.Join(p.dataDir, n+".aarl")} {
			if _, err := os.Lstat(f); err == nil {
				return true
			}
		}
		return false
	}
}
