package main

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/term"
)

// Terminal is where aegis asks a human for a passphrase: the controlling
// terminal (/dev/tty), never argv, the environment or stdin, so that a
// program that drives aegis through pipes, an agent's shell tool among
// them, cannot type it.
type Terminal interface {
	// ReadPassphrase shows prompt on the terminal and reads one line
	// without echoing it.
	ReadPassphrase(prompt string) ([]byte, error)
	Close() error
}

// errNoTerminal: the process has no controlling terminal to ask on.
var errNoTerminal = errors.New("no terminal to ask the passphrase on")

// terminal opens the terminal of Main.OpenTerminal, else /dev/tty.
func (m *Main) terminal() (Terminal, error) {
	if m.OpenTerminal != nil {
		return m.OpenTerminal()
	}
	return openDevTTY()
}

// devTTY is the process's controlling terminal (/dev/tty; on Windows its
// console, CONIN$ and CONOUT$).
type devTTY struct{ in, out *os.File }

func openDevTTY() (Terminal, error) {
	in, out, err := openConsole()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errNoTerminal, ttyName, err)
	}
	if !term.IsTerminal(int(in.Fd())) {
		closeConsole(in, out)
		return nil, fmt.Errorf("%w: %s is not a terminal", errNoTerminal, ttyName)
	}
	return &devTTY{in: in, out: out}, nil
}

func (t *devTTY) ReadPassphrase(prompt string) ([]byte, error) {
	if _, err := fmt.Fprint(t.out, prompt); err != nil {
		return nil, err
	}
	b, err := term.ReadPassword(int(t.in.Fd()))
	fmt.Fprintln(t.out)
	if err != nil {
		return nil, fmt.Errorf("read passphrase from %s: %w", ttyName, err)
	}
	return b, nil
}

func (t *devTTY) Close() error { return closeConsole(t.in, t.out) }

// noTerminalHint says why there is no prompt and what to do.
const noTerminalHint = "run it from an interactive terminal: the passphrase is read only from /dev/tty, never from arguments, the environment or stdin, so that a program driving aegis through pipes (an agent's shell tool) cannot give it"

// askPassphrase asks for a passphrase on the terminal; with confirm, twice,
// and the two must match.
func (m *Main) askPassphrase(prompt string, confirm bool) ([]byte, error) {
	t, err := m.terminal()
	if err != nil {
		return nil, withHint(err, noTerminalHint)
	}
	defer t.Close()
	p, err := t.ReadPassphrase(prompt)
	if err != nil {
		return nil, err
	}
	if confirm {
		again, err := t.ReadPassphrase("again, to confirm: ")
		if err != nil {
			return nil, err
		}
		if string(again) != string(p) {
			return nil, withHint(errors.New("the two passphrases differ"), "run it again and type the same passphrase twice")
		}
	}
	return p, nil
}
