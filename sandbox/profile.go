package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
)

// Profile is what a confined server may reach. It is deny by default: an
// empty Profile grants nothing but /dev/null (see the package
// documentation), and ExecSupport is never implied.
//
// Paths must be absolute. A path named in both ReadPaths and WritePaths is a
// write grant. Grants are recursive for directories.
type Profile struct {
	// ReadPaths may be read (and executed) beneath.
	ReadPaths []string `json:"read_paths,omitempty"`
	// WritePaths may be read, written, created and removed beneath.
	WritePaths []string `json:"write_paths,omitempty"`
	// Net lists outbound TCP grants. Empty means every network system
	// call is denied. The kernel enforces the port only: a grant for
	// 127.0.0.1:8080 lets the child connect to port 8080 on any host.
	Net []NetGrant `json:"net,omitempty"`
	// ExecSupport grants read on /usr /lib /lib64 /bin /sbin /etc /dev
	// /proc, enough to start a dynamically linked program. It is a named
	// hole (the child can read /etc/passwd and walk /proc).
	ExecSupport bool `json:"exec_support,omitempty"`
	// BestEffort turns everything the kernel or the filesystem cannot
	// honour into a recorded degradation instead of a refusal.
	BestEffort bool `json:"best_effort,omitempty"`
	// Protect lists paths the child must never reach, even when a grant
	// covers them (the signing key, the state and runtime directories).
	Protect []string `json:"protect,omitempty"`
	// AllowUDP permits UDP sockets when Net is not empty. Before landlock
	// ABI 10 the kernel cannot restrict UDP ports, so this is refused
	// unless BestEffort.
	AllowUDP bool `json:"allow_udp,omitempty"`
	// AllowMPTCP permits MPTCP sockets when Net is not empty. No landlock
	// ABI restricts MPTCP ports, so this is refused unless BestEffort.
	AllowMPTCP bool `json:"allow_mptcp,omitempty"`
}

// NetGrant is one --allow-net HOST:PORT. Host must be a numeric IP address
// or "localhost"; it documents intent and is not enforced by the kernel.
type NetGrant struct {
	Host string `json:"host"`
	Port uint16 `json:"port"`
}

// String returns HOST:PORT, with brackets around an IPv6 host.
func (g NetGrant) String() string {
	if strings.Contains(g.Host, ":") {
		return fmt.Sprintf("[%s]:%d", g.Host, g.Port)
	}
	return fmt.Sprintf("%s:%d", g.Host, g.Port)
}

// ErrRefused matches (with errors.Is) every refusal to confine: an invalid
// profile, a profile this kernel or filesystem cannot honour without
// BestEffort, and a refusal reported by the helper.
var ErrRefused = errors.New("confinement refused")

// RefusalError is a refusal to confine. Problems lists every reason, each
// naming the grant or path concerned. When the helper refused, Fact is the
// refusal it reported: Fact.Refused is set and it claims nothing enforced.
type RefusalError struct {
	Problems []string
	Fact     Fact
}

func (e *RefusalError) Error() string {
	return "refusing to confine: " + strings.Join(e.Problems, "; ")
}

// Is reports whether target is [ErrRefused].
func (e *RefusalError) Is(target error) bool { return target == ErrRefused }

// Validate checks the profile against this kernel and filesystem, as the
// helper will before restricting anything. It returns a *[RefusalError]
// listing every problem, or nil.
//
// Always refused: a relative path; a net grant whose host is not a numeric
// IP or "localhost" (unless AllowUDP makes name resolution possible), whose
// port is 0; AllowUDP or AllowMPTCP without a net grant.
//
// Refused unless BestEffort (then a degradation in the [Fact]): a grant that
// covers a protected path (a parent directory granted by mistake) or lies
// inside one, named with both paths; a protected file with more than one
// hard link; a granted path that does not exist; a kernel without landlock
// ABI 7 or seccomp; AllowUDP before landlock ABI 10; AllowMPTCP. Under
// BestEffort a grant that covers a protected path is narrowed around it
// (see the package documentation) rather than applied whole.
func (p Profile) Validate() error {
	pl, err := newPlan(p)
	if err != nil {
		return err
	}
	return pl.refusal()
}

// structural returns the problems no BestEffort can excuse.
func (p Profile) structural() []string {
	var probs []string
	abs := func(kind string, paths []string) {
		for _, path := range paths {
			switch {
			case path == "":
				probs = append(probs, kind+" path is empty")
			case !filepath.IsAbs(path):
				probs = append(probs, fmt.Sprintf("%s path %q is not absolute", kind, path))
			}
		}
	}
	abs("read", p.ReadPaths)
	abs("write", p.WritePaths)
	abs("protected", p.Protect)
	for _, g := range p.Net {
		switch {
		case g.Port == 0:
			probs = append(probs, fmt.Sprintf("net grant %q needs a port 1-65535", g.String()))
		case g.Host == "":
			probs = append(probs, fmt.Sprintf("net grant %q needs a host", g.String()))
		case !numericOrLocalhost(g.Host) && !p.AllowUDP:
			probs = append(probs, fmt.Sprintf("net grant %q: host must be a numeric IP or localhost: "+
				"the child cannot resolve names (DNS over UDP is denied) and the kernel restricts ports, not hosts", g.String()))
		}
	}
	if len(p.Net) == 0 && p.AllowUDP {
		probs = append(probs, "allow UDP needs a net grant")
	}
	if len(p.Net) == 0 && p.AllowMPTCP {
		probs = append(probs, "allow MPTCP needs a net grant")
	}
	return probs
}

func numericOrLocalhost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	_, err := netip.ParseAddr(host)
	return err == nil
}
