package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/aegis-dev/aegis/events"
	"github.com/aegis-dev/aegis/policy"
)

// gwServer is a server aegis init puts in the gateway file.
type gwServer struct {
	name string
	argv []string
	env  [][2]string // NAME, value, in the host's order
}

// gatewayEdit is what aegis init did to the gateway file.
type gatewayEdit struct {
	added, present []string // server names
	created        bool     // the file is new
	backup         string   // where the old file went
	noProfile      bool     // it has no default profile to add the servers to
}

// gatewayServers reads the command and args of the servers of the gateway
// file (none when there is no file).
func gatewayServers(file string) (map[string][]string, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var f struct {
		Servers map[string]struct {
			Command string   `yaml:"command"`
			Args    []string `yaml:"args"`
			URL     string   `yaml:"url"`
		} `yaml:"servers"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	out := map[string][]string{}
	for n, s := range f.Servers {
		if s.URL != "" {
			out[n] = []string{s.URL}
			continue
		}
		out[n] = append([]string{s.Command}, s.Args...)
	}
	return out, nil
}

// gatewayName is the name the server argv has, or gets, in the gateway
// file: the name of a server there with the same command and args, else
// want made unique among the file's servers (want itself when fixed, the
// user's --name, and then refused if another server has it).
func gatewayName(existing map[string][]string, want string, argv []string, fixed bool, used map[string]bool) (string, error) {
	for n, a := range existing {
		if slices.Equal(a, argv) && !used[n] {
			return n, nil
		}
	}
	if a, ok := existing[want]; ok && fixed {
		return "", withHint(fmt.Errorf("init: the gateway file already has a server named %q, which runs %s", want, strings.Join(a, " ")),
			"choose another --name, or edit the gateway file")
	}
	return uniqueName(want, func(n string) bool { _, ok := existing[n]; return ok || used[n] }), nil
}

// addToGateway puts servers in the gateway file p.file, and lets its
// default profile show their tools, prompts and resources: a new file is the starter
// file, one that is there is edited node by node, so that its comments
// and order stay, after a backup. A server already there with the same
// command is left as it is. The result must parse as a gateway file, or
// nothing is written.
func (p *initPlan) addToGateway(servers []gwServer) (gatewayEdit, error) {
	var ed gatewayEdit
	path, old, mode, err := readHostFile(p.file)
	if err != nil {
		return ed, fmt.Errorf("init: read %s: %w", p.file, err)
	}
	var out []byte
	if old == nil {
		ed.created = true
		for _, s := range servers {
			ed.added = append(ed.added, s.name)
		}
		out = []byte(gatewayStarter(servers))
	} else {
		if out, err = editGateway(old, servers, &ed); err != nil {
			return ed, withHint(fmt.Errorf("init: add to %s: %w", p.file, err), "nothing in it was changed; add the servers by hand (aegis help gateway)")
		}
		if len(ed.added) == 0 {
			return ed, nil
		}
	}
	if _, err := policy.ParseGateway(p.file, out); err != nil {
		return ed, withHint(fmt.Errorf("init: %s would not be a gateway file with the servers added: %w", p.file, err), "nothing in it was changed; add the servers by hand (aegis help gateway)")
	}
	if old == nil {
		if err := events.WriteFileAtomicMode(path, out, 0o600); err != nil {
			return ed, fmt.Errorf("init: write %s: %w", p.file, err)
		}
		p.fileNew = true
		return ed, nil
	}
	w, err := writeWithBackup(path, old, out, mode, false)
	ed.backup = w.backup
	if err != nil {
		return ed, fmt.Errorf("init: write %s: %w", p.file, err)
	}
	return ed, nil
}

// gatewayStarter is the starter gateway file for servers.
func gatewayStarter(servers []gwServer) string {
	var b strings.Builder
	b.WriteString(`# aegis gateway: the servers behind aegis, and the profiles that decide
# which of their tools, prompts and resources the agent sees. aegis help gateway has
# every key.
version: 1
servers:
`)
	var pats []string
	for _, s := range servers {
		b.WriteString("  " + s.name + ":\n")
		b.WriteString("    command: " + string(jsonValue(s.argv[0])) + "\n")
		b.WriteString("    args: " + string(jsonValue(nonNil(s.argv[1:]))) + "\n")
		if len(s.env) > 0 {
			b.WriteString("    env:\n")
			for _, kv := range s.env {
				b.WriteString("      " + kv[0] + ": " + string(jsonValue(kv[1])) + "\n")
			}
		}
		pats = append(pats, s.name+".*")
	}
	allow := string(jsonValue(pats))
	b.WriteString(`profiles:
  default:
    allow: ` + allow + `       # every tool of the servers; narrow it down
    prompts: ` + allow + `     # every prompt
    resources: ` + allow + `   # every resource (or URI patterns: "file:///srv/**")
  # To keep some tools behind a human, narrow default and uncomment a
  # profile that has them. No profile lists it in allowed_transitions, so
  # a switch to it (the agent's aegis__set_profile tool) waits for
  # 'aegis approve ID'.
  # full:
  #   allow: ` + allow + `
activation:
  default_profile: default
`)
	return b.String()
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// editGateway adds servers to the gateway file old as yaml.v3 nodes, so
// that the comments and the order of what is there are kept.
func editGateway(old []byte, servers []gwServer, ed *gatewayEdit) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(old, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("it is not a YAML mapping")
	}
	root := doc.Content[0]
	srv := mappingValue(root, "servers", true)
	if srv == nil || srv.Kind != yaml.MappingNode {
		return nil, errors.New("its servers is not a mapping")
	}
	for _, s := range servers {
		if mappingValue(srv, s.name, false) != nil {
			ed.present = append(ed.present, s.name)
			continue
		}
		v := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		v.Content = append(v.Content, scalar("command"), quoted(s.argv[0]), scalar("args"))
		args := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
		for _, a := range s.argv[1:] {
			args.Content = append(args.Content, quoted(a))
		}
		v.Content = append(v.Content, args)
		if len(s.env) > 0 {
			env := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			for _, kv := range s.env {
				env.Content = append(env.Content, scalar(kv[0]), quoted(kv[1]))
			}
			v.Content = append(v.Content, scalar("env"), env)
		}
		srv.Content = append(srv.Content, scalar(s.name), v)
		ed.added = append(ed.added, s.name)
	}
	if len(ed.added) == 0 {
		return old, nil
	}
	profiles := mappingValue(root, "profiles", false)
	var def *yaml.Node
	if profiles != nil && profiles.Kind == yaml.MappingNode {
		def = mappingValue(profiles, "default", false)
	}
	if def == nil || def.Kind != yaml.MappingNode {
		ed.noProfile = true
	} else {
		for _, key := range []string{"allow", "prompts", "resources"} {
			list := mappingValue(def, key, true)
			if list.Kind == yaml.ScalarNode && list.Tag == "!!null" {
				*list = yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
			}
			if list.Kind != yaml.SequenceNode {
				return nil, fmt.Errorf("the default profile's %s is not a list", key)
			}
			for _, n := range ed.added {
				list.Content = append(list.Content, quoted(n+".*"))
			}
		}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// mappingValue returns the value of key in the mapping m; with add, a key
// that is not there is added with an empty value (null).
func mappingValue(m *yaml.Node, key string, add bool) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	if !add {
		return nil
	}
	v := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: ""}
	m.Content = append(m.Content, scalar(key), v)
	return v
}

func scalar(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func quoted(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}
