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
}

var oauthKeys = []string{"client_id", "client_secret", "client_metadata_url", "scopes", "redirect_uri"}

// oauthKey reads a url server's oauth: mapping.
func (p *parser) oauthKey(s *Server, f field) error {
	fields, err := p.mapping(f.val, f.path, oauthKeys)
	if err != nil {
		return err
	}
	o := &OAuth{}
	var secretLine int
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
