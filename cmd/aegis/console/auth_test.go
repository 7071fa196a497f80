package console

import (
	"net"
	"slices"
	"testing"
)

// A console must not end up reachable from the network by accident: an
// address off loopback needs allowRemote, and even then one named address,
// since every request's Host is checked against it.
func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		attack      string
		addr        string
		allowRemote bool
		remote, ok  bool
	}{
		{"default loopback", "127.0.0.1:0", false, false, true},
		{"IPv6 loopback", "[::1]:8700", false, false, true},
		{"localhost by name", "localhost:8700", false, false, true},
		{"every interface without asking", "0.0.0.0:8700", false, true, false},
		{"empty host is every interface", ":8700", false, true, false},
		{"a LAN address without asking", "192.0.2.7:8700", false, true, false},
		{"a host name without asking", "console.example:8700", false, true, false},
		{"every interface even when asked", "0.0.0.0:8700", true, true, false},
		{"IPv6 every interface even when asked", "[::]:8700", true, true, false},
		{"a LAN address when asked", "192.0.2.7:8700", true, true, true},
		{"no port", "127.0.0.1", false, false, false},
	} {
		remote, err := CheckListen(tc.addr, tc.allowRemote)
		if remote != tc.remote || (err == nil) != tc.ok {
			t.Errorf("%s: CheckListen(%q, %v) = %v, %v; want remote %v, ok %v", tc.attack, tc.addr, tc.allowRemote, remote, err, tc.remote, tc.ok)
		}
	}
}

// A DNS-rebinding page sends its own host name; only the bound address
// (and localhost on loopback) is accepted.
func TestListenHosts(t *testing.T) {
	got := ListenHosts(&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8700})
	if !slices.Equal(got, []string{"127.0.0.1:8700", "localhost:8700"}) {
		t.Errorf("loopback: %v", got)
	}
	got = ListenHosts(&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 8700})
	if !slices.Equal(got, []string{"192.0.2.7:8700"}) {
		t.Errorf("LAN: %v", got)
	}
	a := &auth{hosts: []string{"127.0.0.1:8700", "localhost:8700"}}
	for host, want := range map[string]bool{"127.0.0.1:8700": true, "LOCALHOST:8700": true, "evil.example:8700": false, "127.0.0.1:8701": false, "127.0.0.1": false, "": false} {
		if a.hostOK(host) != want {
			t.Errorf("hostOK(%q) = %v", host, !want)
		}
	}
	for origin, want := range map[string]bool{"http://127.0.0.1:8700": true, "http://localhost:8700": true, "https://127.0.0.1:8700": false, "null": false, "http://evil.example": false} {
		if a.originOK(origin) != want {
			t.Errorf("originOK(%q) = %v", origin, !want)
		}
	}
}
