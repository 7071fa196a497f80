package schemas

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Principal is who a session serves: the caller that an OAuth 2.1 bearer
// token named, once the token was validated ('aegis gateway --listen' as
// a resource server). It is the "principal" member of a session's open
// line and of each call's intent line (schema v2 allows members it does
// not define; a verifier that does not know this one still checks the
// line's hash and chain), and the principal that conditions (when:) see.
//
// It never holds the token, nor anything from which the token could be
// rebuilt: only what the token says about its holder.
type Principal struct {
	// Issuer (iss) and Subject (sub) name the caller: a subject is unique
	// only within its issuer.
	Issuer  string `json:"iss"`
	Subject string `json:"sub"`
	// ClientID is the OAuth client the token was issued to (client_id,
	// else azp), "" when the token names none.
	ClientID string `json:"client_id,omitempty"`
	// Scopes are the token's scopes (scope), sorted, without repeats.
	Scopes []string `json:"scopes,omitempty"`
	// Claims are the claims the configuration chose to keep (such as
	// groups or email), each a string or a list of strings.
	Claims map[string]any `json:"claims,omitempty"`
}

// Limits of what a principal keeps of a token, so that a token cannot
// make every line of its session large.
const (
	MaxPrincipalString = 256 // bytes of one string (longer ones are cut)
	MaxPrincipalList   = 64  // entries of scopes or of one claim's list
)

// Name is how the principal is shown: sub, and @iss when there is one
// ("alice@https://id.example.com").
func (p *Principal) Name() string {
	if p == nil {
		return ""
	}
	if p.Issuer == "" {
		return p.Subject
	}
	return p.Subject + "@" + p.Issuer
}

// Short is the principal's subject, with the claim that names a person
// best beside it when the configuration kept one (email, then
// preferred_username, then name): "id1 (alice@example.com)".
func (p *Principal) Short() string {
	if p == nil {
		return ""
	}
	for _, k := range []string{"email", "preferred_username", "name"} {
		if s, ok := p.Claims[k].(string); ok && s != "" && s != p.Subject {
			return p.Subject + " (" + s + ")"
		}
	}
	return p.Subject
}

// HasScope reports whether the principal holds scope s.
func (p *Principal) HasScope(s string) bool {
	return p != nil && slices.Contains(p.Scopes, s)
}

// ClaimStrings returns claim name as a list of strings: a string claim is
// a list of one, a list its string entries; nil when absent.
func (p *Principal) ClaimStrings(name string) []string {
	if p == nil {
		return nil
	}
	switch v := p.Claims[name].(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// NewPrincipal builds a principal from a validated token's members: iss,
// sub, clientID, its scopes (the scope claim split on spaces, or a list),
// and of claims those named in keep. Kept claims are made strings or lists
// of strings (a number or a boolean becomes its JSON text; objects and
// nulls are dropped), so that the principal is inside the audit value
// space, and every string is valid UTF-8 and cut at MaxPrincipalString.
func NewPrincipal(iss, sub, clientID string, scopes []string, claims map[string]any, keep []string) *Principal {
	p := &Principal{Issuer: clip(iss), Subject: clip(sub), ClientID: clip(clientID)}
	for _, s := range scopes {
		if s = clip(s); s != "" && !slices.Contains(p.Scopes, s) && len(p.Scopes) < MaxPrincipalList {
			p.Scopes = append(p.Scopes, s)
		}
	}
	slices.Sort(p.Scopes)
	for _, k := range keep {
		v, ok := claims[k]
		if !ok {
			continue
		}
		if kept := claimValue(v); kept != nil {
			if p.Claims == nil {
				p.Claims = map[string]any{}
			}
			p.Claims[k] = kept
		}
	}
	return p
}

// claimValue is v as a principal keeps it, nil for what it drops.
func claimValue(v any) any {
	switch t := v.(type) {
	case []any:
		out := make([]any, 0, min(len(t), MaxPrincipalList))
		for _, e := range t {
			if len(out) == MaxPrincipalList {
				break
			}
			if s, ok := scalar(e); ok {
				out = append(out, s)
			}
		}
		return out
	case []string:
		out := make([]any, 0, min(len(t), MaxPrincipalList))
		for _, e := range t {
			if len(out) == MaxPrincipalList {
				break
			}
			out = append(out, clip(e))
		}
		return out
	}
	if s, ok := scalar(v); ok {
		return s
	}
	return nil
}

func scalar(v any) (string, bool) {
	switch t := v.(type) {
	case string:
		return clip(t), true
	case bool:
		return strconv.FormatBool(t), true
	case float64:
		return clip(strconv.FormatFloat(t, 'g', -1, 64)), true
	case int64:
		return strconv.FormatInt(t, 10), true
	case int:
		return strconv.Itoa(t), true
	case fmt.Stringer: // json.Number
		return clip(t.String()), true
	}
	return "", false
}

// clip makes s valid UTF-8 and at most MaxPrincipalString bytes.
func clip(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxPrincipalString {
		return s
	}
	s = s[:MaxPrincipalString]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// Value is the principal as a member of an audit line (inside the audit
// value space): a map with iss and sub always, the rest when not empty.
func (p *Principal) Value() map[string]any {
	m := map[string]any{"iss": p.Issuer, "sub": p.Subject}
	if p.ClientID != "" {
		m["client_id"] = p.ClientID
	}
	if len(p.Scopes) > 0 {
		l := make([]any, len(p.Scopes))
		for i, s := range p.Scopes {
			l[i] = s
		}
		m["scopes"] = l
	}
	if len(p.Claims) > 0 {
		c := make(map[string]any, len(p.Claims))
		for k, v := range p.Claims {
			c[clip(k)] = v
		}
		m["claims"] = c
	}
	return m
}
