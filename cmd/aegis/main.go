package main

import (
	"context"
	"os"
)

func main() {
	m := &Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	os.Exit(m.Run(context.Background(), os.Args[1:]))
}
