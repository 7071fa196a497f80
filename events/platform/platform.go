package platform

import "errors"

// ErrLocked is what [TryLock] returns when another holds the lock.
var ErrLocked = errors.New("locked by another process")
