package schemas

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
)

// KindServerConnection records the connection state of a remote
// downstream server of aegis gateway (a url: server): connected, retrying,
// failed or closed. Its payload is a [ServerConnection].
const KindServerConnection Kind = "server.connection"

// ServerConnectionSchema is the JSON Schema (draft 2020-12) of the payload
// of a server.connection event. [ServerConnection.Validate] accepts the
// same documents; a test holds them to that.
//
//go:embed server_connection.schema.json
var ServerConnectionSchema []byte

// The states of a remote server's connection.
const (
	// ConnConnected: the server answered initialize over Transport, at
	// attempt Attempt.
	ConnConnected = "connected"
	// ConnRetrying: attempt Attempt failed with Error; another follows.
	ConnRetrying = "retrying"
	// ConnFailed: the last attempt failed with Error (the server is
	// skipped), or, without Attempt, a connected session ended with Error
	// before the gateway closed it (its calls are refused from then on).
	ConnFailed = "failed"
	// ConnClosed: the gateway closed the session when it stopped.
	ConnClosed = "closed"
)

// ServerConnection is the payload of a server.connection event. Invariants
// (the schema's): URL is the server's url without userinfo, query or
// fragment, so that no secret of the url is recorded; no header is part
// of it; Error is set exactly when State is retrying or failed, and
// Attempt, when set, counts from 1.
type ServerConnection struct {
	Server    string `json:"server"`
	URL       string `json:"url"`
	Transport string `json:"transport"` // streamable or sse
	State     string `json:"state"`
	Attempt   int    `json:"attempt,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Compiled at first use: every aegis process would otherwise compile
// them at start-up (the counted repetition alone is a program of about
// 60 KiB), and only the gateway's remote servers use them.
var (
	connServerRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`) })
	connURLRE    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^https?://[^/?#@ ]+(/[^?# ]*)?$`) })
)

// Validate checks c as the schema does.
func (c ServerConnection) Validate() error {
	switch {
	case !connServerRE().MatchString(c.Server):
		return fmt.Errorf("server.connection: server %q is not a server name", c.Server)
	case !connURLRE().MatchString(c.URL):
		return errors.New("server.connection: url is not an http(s) url without userinfo, query and fragment")
	case c.Transport != "streamable" && c.Transport != "sse":
		return fmt.Errorf("server.connection: transport %q is not streamable or sse", c.Transport)
	case c.Attempt < 0:
		return errors.New("server.connection: attempt counts from 1")
	}
	switch c.State {
	case ConnConnected, ConnClosed:
		if c.Error != "" {
			return fmt.Errorf("server.connection: a %s state has no error", c.State)
		}
	case ConnRetrying:
		if c.Attempt == 0 || c.Error == "" {
			return errors.New("server.connection: retrying needs attempt and error")
		}
	case ConnFailed:
		if c.Error == "" {
			return errors.New("server.connection: failed needs an error")
		}
	default:
		return fmt.Errorf("server.connection: unknown state %q", c.State)
	}
	return nil
}

// DecodeServerConnection reads a server.connection payload strictly (no
// unknown member, one JSON value) and validates it.
func DecodeServerConnection(payload []byte) (ServerConnection, error) {
	var c ServerConnection
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return ServerConnection{}, fmt.Errorf("server.connection: %w", err)
	}
	if dec.More() {
		return ServerConnection{}, errors.New("server.connection: trailing data")
	}
	var raw map[string]json.RawMessage
	json.Unmarshal(payload, &raw)
	if a, ok := raw["attempt"]; ok && string(a) == "0" {
		return ServerConnection{}, errors.New("server.connection: attempt counts from 1")
	}
	if e, ok := raw["error"]; ok && string(e) == `""` {
		return ServerConnection{}, errors.New("server.connection: an empty error")
	}
	if err := c.Validate(); err != nil {
		return ServerConnection{}, err
	}
	return c, nil
}
