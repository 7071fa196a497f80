package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxSlow caps the duration accepted by the slow tool.
const maxSlow = 10000 * time.Millisecond

// readme is the text of the example://readme resource.
const readme = "aegis-example is a fixture MCP server: tools echo, add, fail and slow; " +
	"this resource; and the prompt greet.\n"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "aegis-example-server: error: %v\n", err)
		os.Exit(exitCode(err))
	}
}

// usageError is a command-line mistake; it exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func exitCode(err error) int {
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// run parses args, then serves MCP on stdin and stdout until stdin is closed
// or ctx is cancelled; both are a clean shutdown and return nil.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("aegis-example-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	verbose := fs.Bool("v", false, "log SDK session events to stderr")
	callLog := fs.String("calls", "", "append the name of every tools/call received to this file (for tests)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	if fs.NArg() != 0 {
		return &usageError{fmt.Sprintf("unexpected arguments %q", fs.Args())}
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	srv := newServer(logger)
	if *callLog != "" {
		f, err := os.OpenFile(*callLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("open call log: %w", err)
		}
		defer f.Close()
		srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
					fmt.Fprintln(f, r.Params.Name)
				}
				return next(ctx, method, req)
			}
		})
	}
	err := srv.Run(ctx, &mcp.StdioTransport{})
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("serve stdio: %w", err)
	}
	return nil
}

// newServer returns the example server with its tools, resource and prompt.
func newServer(logger *slog.Logger) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "aegis-example", Version: "0.1.0"},
		&mcp.ServerOptions{Logger: logger})

	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Return message unchanged as text."}, echo)
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Add two numbers; the sum is returned as text and as structured output."}, add)
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Always fail with a tool error whose text is reason."}, fail)
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "Sleep for ms milliseconds (at most 10000), then report it."}, slow)

	s.AddResource(&mcp.Resource{
		URI:         "example://readme",
		Name:        "readme",
		Description: "What this server offers.",
		MIMEType:    "text/plain",
	}, readReadme)

	s.AddPrompt(&mcp.Prompt{
		Name:        "greet",
		Description: "Greet someone by name.",
		Arguments:   []*mcp.PromptArgument{{Name: "name", Description: "Who to greet.", Required: true}},
	}, greet)
	return s
}

type echoIn struct {
	Message string `json:"message" jsonschema:"the text to return"`
}

func echo(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
	return textResult(in.Message), nil, nil
}

type addIn struct {
	A float64 `json:"a" jsonschema:"first addend"`
	B float64 `json:"b" jsonschema:"second addend"`
}

type addOut struct {
	Sum float64 `json:"sum" jsonschema:"a + b"`
}

func add(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
	sum := in.A + in.B
	return textResult(strconv.FormatFloat(sum, 'g', -1, 64)), addOut{Sum: sum}, nil
}

type failIn struct {
	Reason string `json:"reason" jsonschema:"the error text to return"`
}

func fail(_ context.Context, _ *mcp.CallToolRequest, in failIn) (*mcp.CallToolResult, any, error) {
	res := textResult(in.Reason)
	res.IsError = true
	return res, nil, nil
}

type slowIn struct {
	MS int `json:"ms" jsonschema:"milliseconds to sleep, capped at 10000"`
}

func slow(ctx context.Context, _ *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, any, error) {
	d := min(max(time.Duration(in.MS)*time.Millisecond, 0), maxSlow)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("slow: %w", ctx.Err())
	case <-t.C:
	}
	return textResult(fmt.Sprintf("slept %d ms", d.Milliseconds())), nil, nil
}

func readReadme(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{
		URI:      req.Params.URI,
		MIMEType: "text/plain",
		Text:     readme,
	}}}, nil
}

func greet(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	name := req.Params.Arguments["name"]
	if name == "" {
		name = "stranger"
	}
	return &mcp.GetPromptResult{
		Description: "A greeting for " + name + ".",
		Messages: []*mcp.PromptMessage{{
			Role:    "user",
			Content: &mcp.TextContent{Text: "Hello, " + name + "!"},
		}},
	}, nil
}

func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}
