//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// keptCapabilities is what a server started by root may still hold: the
// container-runtime default set without CAP_MKNOD, CAP_NET_RAW,
// CAP_SETFCAP and CAP_SETPCAP. Everything else goes, notably
// CAP_SYS_RAWIO (/proc/kcore, /dev/mem, port I/O), CAP_SYS_MODULE,
// CAP_SYS_BOOT (kexec), CAP_SYS_ADMIN, CAP_BPF and CAP_NET_ADMIN: each would
// let a root server read the proxy's memory or run kernel code, which no
// path rule can stop.
func keptCapabilities() map[int]bool {
	return map[int]bool{
		unix.CAP_CHOWN: true, unix.CAP_DAC_OVERRIDE: true, unix.CAP_FOWNER: true, unix.CAP_FSETID: true,
		unix.CAP_KILL: true, unix.CAP_SETGID: true, unix.CAP_SETUID: true, unix.CAP_NET_BIND_SERVICE: true,
		unix.CAP_SYS_CHROOT: true, unix.CAP_AUDIT_WRITE: true,
	}
}

// dropCapabilities limits what the server can hold after exec, on the
// calling thread: it clears the ambient and inheritable sets and removes
// from the bounding set every capability not in keptCapabilities. It
// returns the capabilities the server can hold: for root the remaining
// bounding set; otherwise the permitted set that survives, which is empty
// for an ordinary user (no_new_privs keeps setuid and file capabilities
// from adding any).
func dropCapabilities() ([]string, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil, fmt.Errorf("capget: %w", err)
	}
	permitted := uint64(data[0].Permitted) | uint64(data[1].Permitted)<<32
	root := os.Geteuid() == 0 || os.Getuid() == 0
	if !root && permitted == 0 {
		return nil, nil // nothing to hold, and exec cannot add any
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if data[0].Inheritable != 0 || data[1].Inheritable != 0 {
		data[0].Inheritable, data[1].Inheritable = 0, 0
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			return nil, fmt.Errorf("clear inheritable capabilities: %w", err)
		}
	}
	keep := keptCapabilities()
	var kept []string
	for c := 0; c < 64; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the last capability this kernel knows
		}
		if err != nil {
			return nil, fmt.Errorf("read bounding set: %w", err)
		}
		if in == 0 {
			continue
		}
		if !keep[c] {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return nil, fmt.Errorf("drop %s from the bounding set: %w", capName(c), err)
			}
			continue
		}
		if root || permitted&(1<<c) != 0 {
			kept = append(kept, capName(c))
		}
	}
	return kept, nil
}

func capName(c int) string {
	names := []string{"chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid",
		"setuid", "setpcap", "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw",
		"ipc_lock", "ipc_owner", "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct",
		"sys_admin", "sys_boot", "sys_nice", "sys_resource", "sys_time", "sys_tty_config", "mknod", "lease",
		"audit_write", "audit_control", "setfcap", "mac_override", "mac_admin", "syslog", "wake_alarm",
		"block_suspend", "audit_read", "perfmon", "bpf", "checkpoint_restore"}
	if c >= 0 && c < len(names) {
		return "cap_" + names[c]
	}
	return fmt.Sprintf("cap_%d", c)
}
