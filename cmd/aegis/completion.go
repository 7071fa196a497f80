package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

const completionUsage = `Usage:
  aegis completion bash|zsh|fish

Prints a shell completion script for aegis: command names, each
command's flags, and file names for the rest. Load it from your shell's
start-up file.

Examples:
  $ echo 'source <(aegis completion bash)' >> ~/.bashrc
  $ aegis completion zsh > "${fpath[1]}/_aegis"
  $ aegis completion fish > ~/.config/fish/completions/aegis.fish
`

// flagPattern finds the flags a command's help names.
var flagPattern = regexp.MustCompile(`(?:^|[\s\[(|])(--[a-z][a-z0-9-]*)`)

// completionWords is, per command, what follows it: its flags, and for
// events its subcommands.
func (m *Main) completionWords() (names []string, words map[string][]string, short map[string]string) {
	words, short = map[string][]string{}, map[string]string{}
	for _, c := range m.allCommands() {
		names = append(names, c.name)
		short[c.name] = c.short
		var ws []string
		for _, f := range flagPattern.FindAllStringSubmatch(usageBlock(c.help), -1) {
			if !slices.Contains(ws, f[1]) {
				ws = append(ws, f[1])
			}
		}
		if c.name == "events" {
			ws = append([]string{"list", "append"}, ws...)
		}
		if c.name == "auth" {
			ws = append([]string{"login", "logout"}, ws...)
		}
		if c.name == "hub" {
			ws = append([]string{"enroll", "approver"}, ws...)
		}
		if c.name == "pins" {
			ws = append([]string{"reset"}, ws...)
		}
		if c.name == "prove" {
			ws = append([]string{"inclusion", "consistency", "anchor"}, ws...)
		}
		if c.name == "completion" {
			ws = []string{"bash", "zsh", "fish"}
		}
		if !slices.Contains(ws, "--help") {
			ws = append(ws, "--help")
		}
		words[c.name] = ws
	}
	// After help: a command or a topic.
	help := slices.Clone(names)
	for _, t := range helpTopics() {
		if !slices.Contains(help, t) {
			help = append(help, t)
		}
	}
	words["help"] = append(help, "--full", "--help")
	return names, words, short
}

// usageBlock is the Usage: paragraph of a command's help: the synopsis,
// which names the command's flags and nothing else.
func usageBlock(help string) string {
	_, after, ok := strings.Cut(help, "Usage:")
	if !ok {
		return ""
	}
	block, _, _ := strings.Cut(strings.TrimLeft(after, "\n"), "\n\n")
	return block
}

// allCommands are the commands and help.
func (m *Main) allCommands() []command {
	return append(m.commands(), command{name: "help", short: "print the help of aegis or of a command", help: helpHelp})
}

func (m *Main) runCompletion(_ context.Context, args []string) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprint(m.Stdout, completionUsage)
		return nil
	}
	if len(args) != 1 {
		return usagef("run: aegis completion bash (or zsh, or fish)", "completion takes one shell name")
	}
	names, words, short := m.completionWords()
	// The commands whose next word is a subcommand or a topic, not a flag
	// or a file: events list, prove inclusion, help policy, …
	var subs []string
	for _, n := range names {
		if slices.ContainsFunc(words[n], func(w string) bool { return !strings.HasPrefix(w, "-") }) {
			subs = append(subs, n)
		}
	}
	if !slices.Contains(subs, "help") {
		subs = append(subs, "help")
	}
	alt := strings.Join(subs, "|")
	var b strings.Builder
	switch args[0] {
	case "bash":
		fmt.Fprintf(&b, "# bash completion for aegis; load with: source <(aegis completion bash)\n")
		fmt.Fprintf(&b, "_aegis() {\n\tlocal cur=\"${COMP_WORDS[COMP_CWORD]}\" words=\"\"\n")
		fmt.Fprintf(&b, "\tif [[ $COMP_CWORD -eq 1 ]]; then\n\t\tCOMPREPLY=($(compgen -W %q -- \"$cur\"))\n\t\treturn\n\tfi\n", strings.Join(names, " "))
		fmt.Fprintf(&b, "\tcase \"${COMP_WORDS[1]}\" in\n")
		for _, n := range names {
			fmt.Fprintf(&b, "\t%s) words=%q ;;\n", n, strings.Join(words[n], " "))
		}
		fmt.Fprintf(&b, "\tesac\n")
		fmt.Fprintf(&b, "\tif [[ \"$cur\" == -* || ( \"${COMP_WORDS[1]}\" =~ ^(%s)$ && $COMP_CWORD -eq 2 ) ]]; then\n", alt)
		fmt.Fprintf(&b, "\t\tCOMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n\telse\n\t\tCOMPREPLY=($(compgen -f -- \"$cur\"))\n\tfi\n}\n")
		fmt.Fprintf(&b, "complete -o filenames -F _aegis aegis\n")
	case "zsh":
		fmt.Fprintf(&b, "#compdef aegis\n# zsh completion for aegis; save as _aegis in a folder of $fpath\n")
		fmt.Fprintf(&b, "_aegis() {\n\tlocal -a commands opts\n\tcommands=(\n")
		for _, n := range names {
			fmt.Fprintf(&b, "\t\t%s\n", zshQuote(n+":"+short[n]))
		}
		fmt.Fprintf(&b, "\t)\n\tif (( CURRENT == 2 )); then\n\t\t_describe 'command' commands\n\t\treturn\n\tfi\n")
		fmt.Fprintf(&b, "\tcase $words[2] in\n")
		for _, n := range names {
			fmt.Fprintf(&b, "\t%s) opts=(%s) ;;\n", n, strings.Join(words[n], " "))
		}
		fmt.Fprintf(&b, "\tesac\n")
		fmt.Fprintf(&b, "\tif [[ $PREFIX == -* || ( $words[2] == (%s) && CURRENT -eq 3 ) ]]; then\n", alt)
		fmt.Fprintf(&b, "\t\tcompadd -- $opts\n\telse\n\t\t_files\n\tfi\n}\n")
		fmt.Fprintf(&b, "compdef _aegis aegis\n")
	case "fish":
		fmt.Fprintf(&b, "# fish completion for aegis; save as ~/.config/fish/completions/aegis.fish\n")
		fmt.Fprintf(&b, "complete -c aegis -f -n __fish_use_subcommand -a %s\n", fishQuote(strings.Join(names, " ")))
		for _, n := range names {
			var args []string
			for _, w := range words[n] {
				if long, ok := strings.CutPrefix(w, "--"); ok {
					fmt.Fprintf(&b, "complete -c aegis -n '__fish_seen_subcommand_from %s' -l %s\n", n, long)
				} else {
					args = append(args, w)
				}
			}
			if len(args) > 0 {
				fmt.Fprintf(&b, "complete -c aegis -f -n '__fish_seen_subcommand_from %s' -a %s\n", n, fishQuote(strings.Join(args, " ")))
			}
		}
	default:
		return usagef("run: aegis completion bash (or zsh, or fish)", "completion: unknown shell %q", args[0])
	}
	fmt.Fprint(m.Stdout, b.String())
	return nil
}

// zshQuote quotes s for zsh in single quotes.
func zshQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// fishQuote quotes s for fish in single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}
