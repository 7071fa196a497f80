package policy

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// OAuth of a url server: aegis is an OAuth 2.1 client of the server's
// authorization server (aegis auth login SERVER once, then the gateway
// refreshes the token). Invariants of what ParseGateway accepts:
//
//   - oauth: is for a url server only, and not beside a header named
//     Authorization (the token goes there).
//   - client_secret is {file: PATH} or {env: VAR}, never a literal: it is
//     a secret, read when aegis logs in or refreshes, never recorded.
//     It needs client_id.
//   - client_metadata_url (a client ID metadata document) is an https://
//     url with a path; redirect_uri is http:// to a loopback host
//     (RFC 8252 §7.3: the browser comes back to aegis on this machine).
//   - An empty mapping (oauth: {}) is complete: aegis registers itself
//     with the server's authorization server (RFC 7591) when it offers
//     that, else the login says which key to give.
//   - token_exchange: (on behalf of each caller, RFC 8693) stands alone
//     in oauth:: the server is reached with each --listen caller's token
//     exchanged, never with a login, so a login key beside it is refused
//     at its line. It needs token_endpoint (https://, or http:// to a
//     loopback host), client_id and client_secret (the gateway
//     authenticates as its own client); resource is an absolute url
//     (default: the server's url), audience a printable word.

// OAuth is a url server's oauth: mapping.
type OAuth struct {
	// ClientID is a client registered with the authorization server
	// beforehand; "" registers aegis dynamically or uses ClientMetadataURL.
	ClientID string
	// ClientSecret is where the client's secret is read (File or Env of a
	// Header, Name unused); zero for a public client.
	ClientSecret Header
	// ClientMetadataURL is a client ID metadata document's url, used as
	// the client id where the authorization server supports those.
	ClientMetadataURL string
	// Scopes, when not empty, are asked for instead of those the server
	// names.
	Scopes []string
	// RedirectURI is the loopback url the browser comes back to; ""
	// is http://127.0.0.1:<a free port>/callback.
	RedirectURI string
	// Exchange, when not nil, reaches the server on behalf of each caller
	// of gateway --listen (token_exchange:); the other fields are then
	// zero.
	Exchange *TokenExchange
}

// TokenExchange is oauth: token_exchange: the caller's access token is
// exchanged (RFC 8693) at TokenEndpoint for one for the server.
type TokenExchange struct {
	// TokenEndpoint is the authorization server's token endpoint.
	TokenEndpoint string
	// ClientID and ClientSecret (File or Env of a Header) are the
	// gateway's own client at the authorization server.
	ClientID     string
	ClientSecret Header
	// Resource (RFC 8707) is asked for; "" is the server's url.
	Resource string
	// Audience, when not "", is asked for too (the server's name at the
	// authorization server).
	Audience string
	// Scopes, when not empty, are asked for.
	Scopes []string
}

var exchangeKeys = []string{"token_endpoint", "client_id", "client_secret", "resource", "audience", "scopes"}

var oauthKeys = []string{"client_id", "client_secret", "client_metadata_url", "scopes", "redirect_uri", "token_exchange"}

// oauthKey reads a url server's oauth: mapping.
func (p *parser) oauthKey(s *Server, f field) error {
	fields, err := p.mapping(f.val, f.path, oauthKeys)
	if err != nil {
		return err
	}
	o := &OAuth{}
	var secretLine int
	for _, k := range fields {
		if k.name == "token_exchange" {
			if len(fields) > 1 {
				other := fields[0]
				if other.name == "token_exchange" {
					other = fields[1]
				}
				return p.errorf(other.key.Line, other.path, "token_exchange: reaches the server with each caller's exchanged token, never with a login: remove %s, or token_exchange", other.name)
			}
			if o.Exchange, err = p.exchangeKey(k); err != nil {
				return err
			}
			s.OAuth = o
			return nil
		}
	}
	for _, k := range fields {
		switch k.name {
		case "client_id":
			if o.ClientID, err = p.text(k.val, k.path); err != nil {
				return err
			}
			if o.ClientID == "" || HeaderValueProblem(o.ClientID) != "" {
				return p.errorf(k.val.Line, k.path, "want a client id: printable, on one line")
			}
		case "client_secret":
			if k.val.Kind != yaml.MappingNode {
				return p.errorf(k.val.Line, k.path, "a client secret is read from {file: PATH} or {env: VAR}, never written in the file")
			}
			if o.ClientSecret.File, o.ClientSecret.Env, err = p.headerSource(k.val, k.path); err != nil {
				return err
			}
			secretLine = k.key.Line
		case "client_metadata_url":
			v, err := p.text(k.val, k.path)
			if err != nil {
				return err
			}
			u, reason := parseURI(v)
			if reason != "" || u.scheme != "https" || !u.authority || u.host == "" || u.hasFragment || strings.Join(u.segs, "") == "" {
				return p.errorf(k.val.Line, k.path, "want an https:// url with a path (a client ID metadata document)")
			}
			o.ClientMetadataURL = v
		case "scopes":
			list, err := p.strList(k.val, k.path, true)
			if err != nil {
				return err
			}
			for _, sc := range list {
				if sc.s == "" || strings.ContainsAny(sc.s, " \t\r\n\"\\") {
					return p.errorf(sc.line, sc.path, "a scope is one word without quotes or backslashes")
				}
				o.Scopes = append(o.Scopes, sc.s)
			}
		case "redirect_uri":
			v, err := p.text(k.val, k.path)
			if err != nil {
				return err
			}
			u, reason := parseURI(v)
			if reason != "" || u.scheme != "http" || !u.authority || !loopbackHost(u.host) || u.hasFragment {
				return p.errorf(k.val.Line, k.path, "want http:// to a loopback host (http://127.0.0.1:PORT/callback): the browser comes back to aegis on this machine")
			}
			o.RedirectURI = v
		}
	}
	if secretLine != 0 && o.ClientID == "" {
		return p.errorf(secretLine, keyPath(f.path, "client_secret"), "client_secret needs client_id")
	}
	s.OAuth = o
	return nil
}

// exchangeKey reads oauth: token_exchange:.
func (p *parser) exchangeKey(f field) (*TokenExchange, error) {
	if f.val.Kind != yaml.MappingNode {
		return nil, p.errorf(f.val.Line, f.path, "want a mapping with token_endpoint, client_id and client_secret")
	}
	fields, err := p.mapping(f.val, f.path, exchangeKeys)
	if err != nil {
		return nil, err
	}
	x := &TokenExchange{}
	for _, k := range fields {
		switch k.name {
		case "token_endpoint":
			v, err := p.text(k.val, k.path)
			if err != nil {
				return nil, err
			}
			u, reason := parseURI(v)
			if reason != "" || !u.authority || u.host == "" || u.hasFragment || !(u.scheme == "https" || u.scheme == "http" && loopbackHost(u.host)) {
				return nil, p.errorf(k.val.Line, k.path, "want the authorization server's token endpoint: an https:// url, or http:// to a loopback host")
			}
			x.TokenEndpoint = v
		case "client_id":
			if x.ClientID, err = p.text(k.val, k.path); err != nil {
				return nil, err
			}
			if x.ClientID == "" || HeaderValueProblem(x.ClientID) != "" {
				return nil, p.errorf(k.val.Line, k.path, "want a client id: printable, on one line")
			}
		case "client_secret":
			if k.val.Kind != yaml.MappingNode {
				return nil, p.errorf(k.val.Line, k.path, "a client secret is read from {file: PATH} or {env: VAR}, never written in the file")
			}
			if x.ClientSecret.File, x.ClientSecret.Env, err = p.headerSource(k.val, k.path); err != nil {
				return nil, err
			}
		case "resource":
			v, err := p.text(k.val, k.path)
			if err != nil {
				return nil, err
			}
			u, reason := parseURI(v)
			if reason != "" || u.scheme == "" || u.hasFragment {
				return nil, p.errorf(k.val.Line, k.path, "want an absolute url without a fragment (RFC 8707)")
			}
			x.Resource = v
		case "audience":
			if x.Audience, err = p.text(k.val, k.path); err != nil {
				return nil, err
			}
			if x.Audience == "" || strings.ContainsAny(x.Audience, " \t\r\n") || HeaderValueProblem(x.Audience) != "" {
				return nil, p.errorf(k.val.Line, k.path, "want the server's name at the authorization server: one printable word")
			}
		case "scopes":
			list, err := p.strList(k.val, k.path, true)
			if err != nil {
				return nil, err
			}
			for _, sc := range list {
				if sc.s == "" || strings.ContainsAny(sc.s, " \t\r\n\"\\") {
					return nil, p.errorf(sc.line, sc.path, "a scope is one word without quotes or backslashes")
				}
				x.Scopes = append(x.Scopes, sc.s)
			}
		}
	}
	for _, need := range []struct{ key, have string }{{"token_endpoint", x.TokenEndpoint}, {"client_id", x.ClientID},
		{"client_secret", x.ClientSecret.File + x.ClientSecret.Env}} {
		if need.have == "" {
			return nil, p.errorf(f.key.Line, f.path, "token_exchange needs %s: the gateway exchanges each caller's token as its own client", need.key)
		}
	}
	return x, nil
}

// oauthWithHeaders refuses oauth: beside an Authorization header.
func (p *parser) oauthWithHeaders(s *Server, byName map[string]field) error {
	f, ok := byName["oauth"]
	if !ok {
		return nil
	}
	for _, h := range s.Headers {
		if strings.EqualFold(h.Name, "Authorization") {
			return p.errorf(f.key.Line, f.path, "oauth: puts the server's token in the Authorization header; remove that header from headers:")
		}
	}
	return nil
}
