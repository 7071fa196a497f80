package schemas

// PolicySetFormat names the projection below. It is the first thing the
// policy_set_hash covers, so a hash of this projection can never equal a hash
// of some other canonical JSON document that happens to share its members. A
// change to the projection that changes any hash needs a new value.
const PolicySetFormat = "aegis-policy-set/1"

// PolicySet is the stable projection of a parsed, validated policy file
// that policy_set_hash covers (upstream-spec §1.8):
//
//	policy_set_hash = lowercase hex SHA-256( RFC 8785 canonical JSON of PolicySet )
//
// The projection is built from the parsed rules, never from the YAML text,
// so comments, key order, quoting, flow or block style and spelled-out
// defaults do not change the hash, while every field that evaluation reads
// does. The rules:
//
//   - Every scalar is a JSON string or boolean. Numbers are written as
//     decimal strings with no plus sign and no leading zeros; only a
//     negative priority has a minus sign ("0", "60", "-5").
//   - Rule order is covered: Rules keeps the order of the file, because file
//     order breaks the last tie in evaluation.
//   - Defaults are written out, so a file that spells a default and one that
//     omits it hash alike: version "1", default "allow", a missing or "*"
//     tool, capability or role is "*", a missing priority is "0".
//   - Members that have no value are omitted, never null: reason when the
//     rule has none, rate except on rate_limit rules, limits when the rule
//     has none, each limit that is not set, park unless it is true, and
//     timeout_seconds unless park is true, on_tool_change unless it is
//     deny or allow.
//   - Rules is always present; a file without rules projects "rules":[].
//
// A projection of a file with one rate-limited rule, in canonical form:
//
//	{"default":"deny","format":"aegis-policy-set/1","rules":[{"action":"rate_limit",
//	"capability":"*","id":"rate-search","priority":"0","rate":{"max":"100",
//	"per_seconds":"60"},"role":"*","tool":"search"}],"version":"1"}
//
// (one line in the real bytes). [PolicySet.Hash] computes the digest.
type PolicySet struct {
	Format  string       `json:"format"`  // always PolicySetFormat
	Version string       `json:"version"` // the policy file version, "1"
	Default string       `json:"default"` // "allow" or "deny"
	Rules   []PolicyRule `json:"rules"`   // file order
	// OnToolChange is the file's on_tool_change when it is not the
	// default (pending_approval): "deny" or "allow". Omitted otherwise, so
	// the hashes of files without it are what they were.
	OnToolChange string `json:"on_tool_change,omitempty"`
}

// PolicyRule is one rule of a [PolicySet].
type PolicyRule struct {
	ID             string        `json:"id"`
	Action         string        `json:"action"` // allow, deny, rate_limit or pending_approval
	Tool           string        `json:"tool"`   // exact tool name, or "*"
	Capability     string        `json:"capability"`
	Role           string        `json:"role"`
	When           string        `json:"when,omitempty"` // the rule's CEL condition, as written
	Priority       string        `json:"priority"`       // decimal int32
	Reason         string        `json:"reason,omitempty"`
	Rate           *PolicyRate   `json:"rate,omitempty"`
	Limits         *PolicyLimits `json:"limits,omitempty"`
	Park           bool          `json:"park,omitempty"`
	TimeoutSeconds string        `json:"timeout_seconds,omitempty"` // decimal, only with park
}

// PolicyRate is the fixed-window budget of a rate_limit rule, in decimal.
type PolicyRate struct {
	Max        string `json:"max"`
	PerSeconds string `json:"per_seconds"`
}

// PolicyLimits are the resource limits an allow or rate_limit rule grants,
// in decimal; a limit that is not set is omitted.
type PolicyLimits struct {
	MaxMemoryBytes string `json:"max_memory_bytes,omitempty"`
	MaxWallMS      string `json:"max_wall_ms,omitempty"`
	MaxOutputBytes string `json:"max_output_bytes,omitempty"`
}

// Canonical returns the RFC 8785 form of p, the exact bytes that
// policy_set_hash covers. It fails only if p cannot be marshalled into the
// audit value space, which a projection built by the policy package never
// does.
func (p PolicySet) Canonical() ([]byte, error) {
	if p.Rules == nil {
		p.Rules = []PolicyRule{}
	}
	return MarshalCanonical(p)
}

// Hash returns policy_set_hash: lowercase hex SHA-256 of [PolicySet.Canonical].
func (p PolicySet) Hash() (string, error) {
	b, err := p.Canonical()
	if err != nil {
		return "", err
	}
	return HashHex(b), nil
}
