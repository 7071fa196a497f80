package events

import "context"

// MirrorIndex is a host's mirror on a hub together with an index folder
// on the reading machine (Dir/index, as a state directory keeps its own):
// what a projection of the mirror, such as the projector's Index, is
// folded from and saved beside, so that the next reader of the mirror
// folds only the messages that reached it since. Replay and MessageDigest
// are the mirror's; IndexGet and IndexPut read and write the folder
// exactly as [Store.IndexGet] and [Store.IndexPut] do the store's.
//
// Like the store's index, the folder is a cache and never a source: its
// users check a snapshot against the mirror (by [Mirror.MessageDigest])
// before they trust it, so a cache of another mirror, of another hub, or
// one that was damaged, is thrown away and the mirror folded again.
type MirrorIndex struct {
	*Mirror
	Dir string
}

// NewMirrorIndex keeps the index of mirror in dir, which it creates
// (mode 0700) if it is missing. Like a state directory, dir must be this
// user's and private: an index holds what the sessions ran, with their
// command lines and record file paths. One that is not is refused.
func NewMirrorIndex(mirror *Mirror, dir string) (*MirrorIndex, error) {
	if err := privateDir(dir, "cache directory"); err != nil {
		return nil, err
	}
	return &MirrorIndex{Mirror: mirror, Dir: dir}, nil
}

// IndexGet returns the value of key in the folder and its revision, or
// [ErrNoIndex].
func (m *MirrorIndex) IndexGet(ctx context.Context, key string) ([]byte, uint64, error) {
	return ReadIndex(m.Dir, key)
}

// IndexPut sets key in the folder and returns the value's revision; a
// reader sees the old value or the new one, never a mix.
func (m *MirrorIndex) IndexPut(ctx context.Context, key string, val []byte) (uint64, error) {
	return WriteIndex(m.Dir, key, val)
}
