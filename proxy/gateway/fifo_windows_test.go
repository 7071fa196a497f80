package gateway

import "testing"

// mkfifo skips: Windows has no named pipes in the file system.
func mkfifo(t *testing.T, path string) {
	t.Skip("Windows has no named pipes in the file system")
}
