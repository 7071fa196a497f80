package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aegis-dev/aegis/events"
)

// jsonField is one member of a JSON object, its value as written.
type jsonField struct {
	key string
	val json.RawMessage
}

// jsonObject is a JSON object that keeps its members' order and every
// member aegis does not know, so that a host's file is written back with
// nothing lost but what aegis changed.
type jsonObject []jsonField

// parseJSONObject reads b, which must hold one JSON object.
func parseJSONObject(b []byte) (jsonObject, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	o := jsonObject{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		o = append(o, jsonField{k, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("something follows the JSON object")
	}
	return o, nil
}

// get returns the value of key (the last one, as a JSON decoder reads a
// repeated key), or nil.
func (o jsonObject) get(key string) json.RawMessage {
	for i := len(o) - 1; i >= 0; i-- {
		if o[i].key == key {
			return o[i].val
		}
	}
	return nil
}

// has reports whether key is a member.
func (o jsonObject) has(key string) bool { return o.get(key) != nil }

// set replaces key's value in place, or appends it.
func (o jsonObject) set(key string, v json.RawMessage) jsonObject {
	for i := len(o) - 1; i >= 0; i-- {
		if o[i].key == key {
			o[i].val = v
			return o
		}
	}
	return append(o, jsonField{key, v})
}

// del removes key.
func (o jsonObject) del(key string) jsonObject {
	out := o[:0]
	for _, f := range o {
		if f.key != key {
			out = append(out, f)
		}
	}
	return out
}

// object reads key's value as an object: nil when absent, an error when
// it is something else.
func (o jsonObject) object(key string) (jsonObject, error) {
	v := o.get(key)
	if v == nil {
		return nil, nil
	}
	return parseJSONObject(v)
}

// str reads key's value as a string ("", false when absent or not one).
func (o jsonObject) str(key string) (string, bool) {
	var s string
	if v := o.get(key); v != nil && json.Unmarshal(v, &s) == nil {
		return s, true
	}
	return "", false
}

// raw is o as compact JSON.
func (o jsonObject) raw() json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonString(f.key))
		b.WriteByte(':')
		b.Write(f.val)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// jsonString is s as a JSON string, <, > and & as they are.
func jsonString(s string) json.RawMessage {
	return jsonValue(s)
}

// jsonValue is v as compact JSON, <, > and & as they are.
func jsonValue(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimRight(b.Bytes(), "\n")
}

// format writes o indented as the file it came from was (indent is that
// file's), with a final newline.
func (o jsonObject) format(indent string) ([]byte, error) {
	var out bytes.Buffer
	if err := json.Indent(&out, o.raw(), "", indent); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// fileIndent is the indentation of a JSON file's first indented line, or
// two spaces.
func fileIndent(b []byte) string {
	for _, line := range bytes.Split(b, []byte("\n"))[1:] {
		trimmed := bytes.TrimLeft(line, " \t")
		if n := len(line) - len(trimmed); n > 0 && len(trimmed) > 0 {
			return string(line[:n])
		}
	}
	return "  "
}

// backupSuffix starts the name of a host file's backup: PATH.bak-TIME.
const backupSuffix = ".bak-"

// writtenSuffix ends the name of the file beside a backup that holds the
// SHA-256 of what aegis wrote in place of it: aegis init --undo restores
// the backup only while the host file is still that.
const writtenSuffix = ".written"

// hostFileWrite is one rewrite of a host's file by aegis init.
type hostFileWrite struct {
	path   string // the file written (a symlink's target)
	backup string // where the old contents went, "" for a new file
}

// writeHostFile replaces the file at path with b: the old contents (old,
// nil when there was no file) are first copied to PATH.bak-TIME with the
// file's mode, b is written through a temporary file renamed over it with
// that same mode, and beside the backup PATH.bak-TIME.written records b's
// SHA-256 for aegis init --undo.
func writeHostFile(path string, old, b []byte, mode os.FileMode) (hostFileWrite, error) {
	return writeWithBackup(path, old, b, mode, true)
}

// writeWithBackup is writeHostFile; without undoable, no .written file is
// kept beside the backup.
func writeWithBackup(path string, old, b []byte, mode os.FileMode, undoable bool) (hostFileWrite, error) {
	w := hostFileWrite{path: path}
	if old != nil {
		stamp := path + backupSuffix + time.Now().UTC().Format("20060102T150405Z")
		w.backup = stamp
		for i := 2; ; i++ {
			if _, err := os.Lstat(w.backup); errors.Is(err, os.ErrNotExist) {
				break
			}
			w.backup = stamp + "-" + strconv.Itoa(i)
		}
		if err := events.WriteFileAtomicMode(w.backup, old, mode); err != nil {
			return w, fmt.Errorf("copy it aside: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return w, err
	}
	if err := events.WriteFileAtomicMode(path, b, mode); err != nil {
		return w, err
	}
	if w.backup != "" && undoable {
		sum := sha256.Sum256(b)
		if err := events.WriteFileAtomicMode(w.backup+writtenSuffix, []byte(hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
			return w, fmt.Errorf("note what was written beside the backup: %w", err)
		}
	}
	return w, nil
}

// readHostFile reads the host file at path, following a symlink to the
// file it names (the file written back is that one). It returns the path
// to write, the contents (nil when there is no file) and the mode.
func readHostFile(path string) (string, []byte, os.FileMode, error) {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return path, nil, 0o600, nil
	}
	if err != nil {
		return path, nil, 0, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return path, nil, 0, err
	}
	return path, b, fi.Mode().Perm(), nil
}

// backupsOf lists the backups aegis init made of the file at path, oldest
// first.
func backupsOf(path string) []string {
	dir, prefix := filepath.Dir(path), filepath.Base(path)+backupSuffix
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, prefix) && !strings.HasSuffix(n, writtenSuffix) && e.Type().IsRegular() {
			out = append(out, filepath.Join(dir, n))
		}
	}
	key := func(b string) (string, int) {
		stamp := strings.TrimPrefix(b, path+backupSuffix)
		t, n, ok := strings.Cut(stamp, "-")
		if !ok {
			return t, 1
		}
		i, _ := strconv.Atoi(n)
		return t, i
	}
	sort.Slice(out, func(i, j int) bool {
		ti, ni := key(out[i])
		tj, nj := key(out[j])
		if ti != tj {
			return ti < tj
		}
		return ni < nj
	})
	return out
}
