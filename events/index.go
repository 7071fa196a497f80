package events

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/nats-io/nats.go"
)

// IndexDir is the folder of the state directory where projections keep
// snapshots of their folds (see the projector's Index). It is a cache:
// whatever it holds can be rebuilt from the stream, and a value that does
// not match the stream is thrown away, never trusted. Unlike the stream,
// its values are overwritten.
//
// It is a folder of files, not a JetStream key-value bucket, because a
// bucket keeps one value per key by a per-subject limit, and the embedded
// server's enforcement of that limit spins forever on a bucket whose
// block was damaged: a cache must never be able to hang the store.
const IndexDir = "index"

// ErrNoIndex is returned by [Store.IndexGet] for a key the index does not
// hold.
var ErrNoIndex = errors.New("no such index entry")

// validIndexKey keeps keys to names that are plain file names.
func validIndexKey(key string) bool {
	if key == "" || len(key) > 64 || key[0] == '.' {
		return false
	}
	for _, c := range key {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// indexMaxValue is the largest value an index entry may hold.
const indexMaxValue = 64 << 20

// IndexGet returns the value of key in the index and its revision (a
// digest of the value), or [ErrNoIndex].
func (s *Store) IndexGet(ctx context.Context, key string) ([]byte, uint64, error) {
	return ReadIndex(s.dir, key)
}

// ReadIndex is [Store.IndexGet] for a state directory that another process
// holds: it reads the index folder without opening the store. What it
// returns was written whole (values are replaced atomically), but it is
// not checked against the stream, which only the holder can read. It
// reads a [MirrorIndex]'s folder the same way.
func ReadIndex(dir, key string) ([]byte, uint64, error) {
	if !validIndexKey(key) {
		return nil, 0, fmt.Errorf("index key %q", key)
	}
	f, err := os.Open(filepath.Join(dir, IndexDir, key))
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, ErrNoIndex
	}
	if err != nil {
		return nil, 0, fmt.Errorf("index %s: %w", key, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, indexMaxValue+1))
	if err != nil {
		return nil, 0, fmt.Errorf("index %s: %w", key, err)
	}
	if len(b) > indexMaxValue {
		return nil, 0, fmt.Errorf("index %s: larger than %d bytes", key, indexMaxValue)
	}
	return b, revision(b), nil
}

// IndexPut sets key in the index and returns the value's revision. Like an
// append, it returns once the value is on disk; a reader sees the old
// value or the new one, never a mix.
func (s *Store) IndexPut(ctx context.Context, key string, val []byte) (uint64, error) {
	return WriteIndex(s.dir, key, val)
}

// WriteIndex is [Store.IndexPut] for the index folder of dir, which it
// creates (mode 0700) if it is missing: dir is a state directory, or
// another private directory that keeps an index the same way (a
// [MirrorIndex]).
func WriteIndex(dir, key string, val []byte) (uint64, error) {
	if !validIndexKey(key) {
		return 0, fmt.Errorf("index key %q", key)
	}
	if len(val) > indexMaxValue {
		return 0, fmt.Errorf("index %s: %d bytes, more than %d", key, len(val), indexMaxValue)
	}
	dir = filepath.Join(dir, IndexDir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return 0, fmt.Errorf("index: %w", err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, key), val); err != nil {
		return 0, fmt.Errorf("index %s: %w", key, err)
	}
	return revision(val), nil
}

// revision names a value by its content.
func revision(b []byte) uint64 {
	h := sha256.Sum256(b)
	return binary.BigEndian.Uint64(h[:8])
}

// MessageDigest returns a digest of the stream message at seq: its
// subject, headers and data. An index remembers the digest of the last
// message it folded, so that a snapshot is used only with the stream it
// was folded from.
func (s *Store) MessageDigest(ctx context.Context, seq uint64) (string, error) {
	m, err := s.stream.GetMsg(ctx, seq)
	if err != nil {
		return "", fmt.Errorf("stream message %d: %w", seq, err)
	}
	return messageDigest(m.Subject, m.Header, m.Data), nil
}

// messageDigest is the digest [Store.MessageDigest] and
// [Mirror.MessageDigest] give of a message: its subject and data, each
// after its length, then its headers in the order of their names, but
// for those a direct get adds to the message as stored
// ([directGetHeaders]): a message reads the same however it is fetched.
func messageDigest(subject string, header nats.Header, data []byte) string {
	h := sha256.New()
	var n [8]byte
	for _, part := range [][]byte{[]byte(subject), data} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	keys := make([]string, 0, len(header))
	for k := range header {
		if !directGetHeaders[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range header[k] {
			h.Write([]byte(k + ":" + v + "\n"))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// StoredBytes returns how many bytes the stream's messages take.
func (s *Store) StoredBytes(ctx context.Context) (uint64, error) {
	st, err := s.state(ctx)
	if err != nil {
		return 0, err
	}
	return st.State.Bytes, nil
}

// directGetHeaders are the headers the server adds to a message it hands
// out by a direct get; aegis never stores them.
var directGetHeaders = map[string]bool{
	"Nats-Stream": true, "Nats-Subject": true, "Nats-Sequence": true, "Nats-Time-Stamp": true,
	"Nats-Num-Pending": true, "Nats-Last-Sequence": true, "Nats-Msg-Size": true,
}
