package policy

import (
	"strconv"
	"time"

	"github.com/aegis-dev/aegis/schemas"
)

// Set is a parsed, validated policy file. It is immutable, so one Set may be
// shared by any number of goroutines and [Engine]s. Build one with [Parse].
type Set struct {
	defaultDeny bool
	rules       []rule
	hash        string
	// onToolChange is on_tool_change (toolchange.go).
	onToolChange ToolChange
	// witnesses is witnesses: (witnesses.go); it takes no part in
	// verdicts, nor in the policy set hash.
	witnesses *schemas.WitnessPolicy
}

// Limits are the resource limits that an allow or rate_limit rule grants to
// the calls it admits. A zero field is a limit the rule does not set; the
// zero Limits means the rule sets none. Parse keeps every value below 2^53,
// so each fits an integer of the audit record.
type Limits struct {
	MaxMemoryBytes uint64
	MaxWallMS      uint64
	MaxOutputBytes uint64
}

// action is what a rule does when it wins.
type action uint8

const (
	actionAllow action = iota
	actionDeny
	actionRateLimit
	actionPendingApproval
)

var actionNames = [...]string{
	actionAllow:           "allow",
	actionDeny:            "deny",
	actionRateLimit:       "rate_limit",
	actionPendingApproval: "pending_approval",
}

func (a action) String() string { return actionNames[a] }

// rule is one parsed rule. An axis ("" for any) matches a request whose
// field is equal to it; a concrete axis never matches a request that leaves
// the field empty, because a rule value is never empty.
type rule struct {
	rank // specificity and priority

	id                     string
	action                 action
	tool, capability, role string
	when                   *condition // nil: the rule applies to every call its axes match
	reason                 string
	max, perSeconds        uint32 // rate_limit only
	per                    time.Duration
	limits                 Limits
	park                   bool
	timeoutSeconds         uint32 // park only
	denyReason             string // the Decision.Reason of a deny or rate-limited verdict
}

// rank orders rules on the same side of deny-overrides: more concrete
// axes first, then a higher priority. A full tie keeps the incumbent, which
// came earlier in the file.
type rank struct {
	specificity int32 // number of concrete axes
	priority    int32
}

// beats reports whether a rule of rank r displaces the incumbent best.
func (r rank) beats(best rank) bool {
	if r.specificity != best.specificity {
		return r.specificity > best.specificity
	}
	return r.priority > best.priority
}

// Hash returns the policy_set_hash of s: lowercase hex SHA-256 over the RFC
// 8785 form of [Set.Projection], as [schemas.PolicySet] defines it. Two files
// that differ only in comments, layout, key order or spelled-out defaults
// have the same hash; any change to what evaluation reads changes it.
func (s *Set) Hash() string { return s.hash }

// Projection returns the projection of s that [Set.Hash] covers. The result
// is a fresh copy that the caller may keep or modify.
func (s *Set) Projection() schemas.PolicySet {
	p := schemas.PolicySet{
		Format:  schemas.PolicySetFormat,
		Version: "1",
		Default: "allow",
		Rules:   make([]schemas.PolicyRule, 0, len(s.rules)),
	}
	if s.onToolChange != ToolChangePendingApproval {
		p.OnToolChange = s.onToolChange.String()
	}
	if s.defaultDeny {
		p.Default = "deny"
	}
	for i := range s.rules {
		r := &s.rules[i]
		pr := schemas.PolicyRule{
			ID:         r.id,
			Action:     r.action.String(),
			Tool:       axisString(r.tool),
			Capability: axisString(r.capability),
			Role:       axisString(r.role),
			Priority:   strconv.FormatInt(int64(r.priority), 10),
			Reason:     r.reason,
			Park:       r.park,
		}
		if r.when != nil {
			pr.When = r.when.src
		}
		if r.action == actionRateLimit {
			pr.Rate = &schemas.PolicyRate{Max: u32(r.max), PerSeconds: u32(r.perSeconds)}
		}
		if r.limits != (Limits{}) {
			pr.Limits = &schemas.PolicyLimits{
				MaxMemoryBytes: u64(r.limits.MaxMemoryBytes),
				MaxWallMS:      u64(r.limits.MaxWallMS),
				MaxOutputBytes: u64(r.limits.MaxOutputBytes),
			}
		}
		if r.park {
			pr.TimeoutSeconds = u32(r.timeoutSeconds)
		}
		p.Rules = append(p.Rules, pr)
	}
	return p
}

func axisString(v string) string {
	if v == "" {
		return "*"
	}
	return v
}

func u32(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// u64 writes a limit, or "" (omitted) when it is not set.
func u64(v uint64) string {
	if v == 0 {
		return ""
	}
	return strconv.FormatUint(v, 10)
}
