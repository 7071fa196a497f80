//go:build !windows

package projector

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// flockHolder returns the PID that holds a write flock on f's file, read
// from /proc/locks, or 0. It matches device and inode, or the inode alone
// when the filesystem reports a device that /proc/locks does not (as
// overlay and btrfs can) and exactly one lock has that inode.
func flockHolder(f *os.File) int {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	dev := uint64(st.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^uint64(0xfff)
	minor := dev&0xff | (dev>>12)&^uint64(0xff)
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, st.Ino)
	ino := ":" + strconv.FormatUint(uint64(st.Ino), 10)

	lf, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer lf.Close()
	exact, byIno, inoMatches := 0, 0, 0
	sc := bufio.NewScanner(lf)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 4242 fe:00:9978721 0 EOF"; a waiter
		// has "->" after the number.
		fields := strings.Fields(sc.Text())
		if len(fields) > 1 && fields[1] == "->" {
			continue
		}
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[3] != "WRITE" {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil || pid <= 0 {
			continue
		}
		switch {
		case fields[5] == want:
			exact = pid
		case strings.HasSuffix(fields[5], ino):
			byIno = pid
			inoMatches++
		}
	}
	if exact > 0 {
		return exact
	}
	if inoMatches == 1 {
		return byIno
	}
	return 0
}
