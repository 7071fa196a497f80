package sandbox

// Fact is the enforcement fact: what the helper actually applied to itself
// before it would exec the server. It is recorded before the server runs.
//
// Every boolean and the ABI numbers are always present in JSON; lists are
// omitted when empty, never null. A refusal sets Refused and claims nothing:
// every enforcement field is false, zero or empty.
type Fact struct {
	// Refused is set when the helper refused to exec; it names why.
	Refused string `json:"refused,omitempty"`
	// ExecPath is the resolved server binary the helper will exec.
	ExecPath string `json:"exec_path,omitempty"`

	// LandlockABI is the ABI the enforced ruleset was built for; 0 means
	// no landlock domain was created.
	LandlockABI int `json:"landlock_abi"`
	// KernelLandlockABI is what the kernel offers (informational).
	KernelLandlockABI int `json:"kernel_landlock_abi"`
	// LandlockFullyEnforced is true when the ruleset was enforced at the
	// requested ABI with every grant applied as asked (none missing or
	// narrowed).
	LandlockFullyEnforced bool `json:"landlock_fully_enforced"`
	// LandlockTCPRestricted is true when landlock handles TCP bind and
	// connect, so only the ports in NetRules may be connected to and no
	// port may be bound.
	LandlockTCPRestricted bool `json:"landlock_tcp_restricted"`
	// FSRules are the filesystem rules in the enforced ruleset.
	FSRules []FSRuleFact `json:"fs_rules,omitempty"`
	// NetRules are the port rules in the enforced ruleset.
	NetRules []NetRuleFact `json:"net_rules,omitempty"`
	// NetGrants are the grants as asked, hosts included.
	NetGrants []NetGrant `json:"net_grants,omitempty"`
	// NetHostsEnforced is always false: landlock restricts ports, not
	// hosts. A grant for one host's port opens that port on every host.
	NetHostsEnforced bool `json:"net_hosts_enforced"`
	// ExecSupport records whether the loader set was granted.
	ExecSupport bool `json:"exec_support"`

	// SeccompApplied is true when the network filter and the syscall
	// ABI guard are both loaded. Read it with SeccompNetworkDenied.
	SeccompApplied bool `json:"seccomp_applied"`
	// SeccompNetworkDenied is true when every network system call is
	// denied (no net grant).
	SeccompNetworkDenied bool `json:"seccomp_network_denied"`
	// SeccompAction is what a denied call gets, e.g. "errno EPERM".
	SeccompAction string `json:"seccomp_action,omitempty"`
	// DeniedSyscalls are denied whatever their arguments.
	DeniedSyscalls []string `json:"denied_syscalls,omitempty"`
	// AllowedSockets is the exact set of sockets the child may create;
	// everything else is denied.
	AllowedSockets []string `json:"allowed_sockets,omitempty"`
	// DeniedSockets names the notable socket families, types, protocols
	// and flags the filter denies (a reading aid; AllowedSockets is
	// exact).
	DeniedSockets []string `json:"denied_sockets,omitempty"`
	// SyscallABIs says, per system call ABI, whether calls are
	// "filtered" (the filter above applies) or "refused" (every call
	// fails with EPERM).
	SyscallABIs map[string]string `json:"syscall_abis,omitempty"`
	// IOURingDenied is true when io_uring_setup, _enter and _register
	// are denied.
	IOURingDenied bool `json:"io_uring_denied"`
	// KeyringsDenied is true when keyctl, add_key and request_key are
	// denied: no keyring of the user (session, user, persistent) can be
	// read, searched or changed.
	KeyringsDenied bool `json:"keyrings_denied"`
	// SessionKeyringFresh is true when the server starts in a new, empty
	// session keyring of its own rather than aegis's.
	SessionKeyringFresh bool `json:"session_keyring_fresh"`
	// NoNewPrivs is read back from the kernel on the thread that execs.
	NoNewPrivs bool `json:"no_new_privs"`
	// CapsKept lists the capabilities the server can hold after exec
	// (absent: none, unless a degradation says they were not dropped). A
	// root server keeps only the container-runtime default set without
	// mknod, net_raw, setfcap and setpcap.
	CapsKept []string `json:"caps_kept,omitempty"`

	// ProtectedPaths are the paths the child must never reach.
	ProtectedPaths []string `json:"protected_paths,omitempty"`
	// ProtectedVerified is true when, after restriction, the helper
	// failed to open every protected path that exists.
	ProtectedVerified bool `json:"protected_verified"`
	// Degradations lists every best-effort downgrade. Empty unless
	// BestEffort was asked for.
	Degradations []string `json:"degradations,omitempty"`
}

// FSRuleFact is one filesystem rule of the enforced ruleset.
type FSRuleFact struct {
	// Path is the granted path as named; Resolved is set when symlinks
	// lead elsewhere (landlock applies the rule to what Path resolves
	// to).
	Path     string `json:"path"`
	Resolved string `json:"resolved,omitempty"`
	// Kind is "dir" (the rule covers the whole hierarchy) or "file".
	Kind string `json:"kind"`
	// Access lists the landlock access rights, e.g. "read_file".
	Access []string `json:"access"`
	// Origin says where the rule came from: "read", "write",
	// "exec_support", "implicit" (/dev/null) or "narrowed" (part of a
	// grant narrowed around a protected path).
	Origin string `json:"origin"`
}

// NetRuleFact is one port rule of the enforced ruleset.
type NetRuleFact struct {
	Port   uint16   `json:"port"`
	Access []string `json:"access"`
}

// refusedFact is the fact of a refusal: the reason and nothing enforced.
func refusedFact(reason string, kernelABI int) Fact {
	return Fact{Refused: reason, KernelLandlockABI: kernelABI}
}
