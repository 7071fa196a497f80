// Package witness is the client side of C2SP tlog-witness: it submits a
// checkpoint of a log, with the consistency proof from the size the
// witness last cosigned, to a witness's add-checkpoint endpoint and
// returns the cosignature lines it answers with.
//
// # Invariants
//
//   - The wire format is the specification's: the body is "old <size>\n",
//     one base64 hash a line (at most 63), an empty line and the signed
//     checkpoint; a 200 answer is note signature lines ("— name sig\n").
//   - A refusal is typed, never a bare error: 409 is a [*ConflictError]
//     carrying the size the witness holds (its text/x.tlog.size body),
//     422 wraps [ErrProof], 403 and 404 wrap [ErrUnknownLog], and any
//     other answer a [*StatusError]. A witness that cannot be reached
//     returns the transport's error; the caller retries later.
//   - Bounded: the request carries the context's deadline (and at most
//     Client.Timeout, 10 s by default), and an answer is read to at most
//     64 KiB.
package witness

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrProof is wrapped when the witness answered 422: the consistency proof
// does not verify against the checkpoint it cosigned last.
var ErrProof = errors.New("the witness refused the consistency proof (422)")

// ErrUnknownLog is wrapped when the witness does not know the log or
// none of its keys signed the checkpoint (403, 404).
var ErrUnknownLog = errors.New("the witness does not know this log or its key")

// ConflictError is a 409: the old size sent is not the size of the last
// checkpoint the witness cosigned (Size), or a checkpoint of that size
// with another root.
type ConflictError struct{ Size int64 }

func (e *ConflictError) Error() string {
	return fmt.Sprintf("the witness holds a checkpoint of size %d (409 Conflict)", e.Size)
}

// StatusError is any other answer than 200.
type StatusError struct {
	Code int
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("the witness answered %d: %s", e.Code, strings.TrimSpace(e.Body))
}

// Client submits checkpoints to one witness.
type Client struct {
	// URL is the witness's submission prefix; add-checkpoint is below it.
	URL string
	// HTTP is the client used (nil: a client of its own).
	HTTP *http.Client
	// Timeout bounds one submission (0: 10 s).
	Timeout time.Duration
}

const maxAnswer = 64 << 10

// AddCheckpoint submits checkpoint (a signed note) with the consistency
// proof from oldSize, and returns the cosignature lines of a 200 answer.
func (c *Client) AddCheckpoint(ctx context.Context, oldSize int64, proof [][32]byte, checkpoint []byte) ([]byte, error) {
	if len(proof) > 63 {
		return nil, fmt.Errorf("a consistency proof of %d hashes (at most 63)", len(proof))
	}
	var body bytes.Buffer
	fmt.Fprintf(&body, "old %d\n", oldSize)
	for _, h := range proof {
		body.WriteString(base64.StdEncoding.EncodeToString(h[:]))
		body.WriteByte('\n')
	}
	body.WriteByte('\n')
	body.Write(checkpoint)
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.URL, "/")+"/add-checkpoint", &body)
	if err != nil {
		return nil, err
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("read the witness's answer: %w", err)
	}
	if len(ans) > maxAnswer {
		return nil, fmt.Errorf("the witness's answer is longer than %d bytes", maxAnswer)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		if len(ans) == 0 || ans[len(ans)-1] != '\n' {
			return nil, errors.New("the witness's answer is not signature lines")
		}
		for _, l := range strings.SplitAfter(string(ans), "\n") {
			if l != "" && !strings.HasPrefix(l, "— ") {
				return nil, fmt.Errorf("the witness's answer holds a line that is not a signature: %q", strings.TrimSpace(l))
			}
		}
		return ans, nil
	case http.StatusConflict:
		s, ok := strings.CutSuffix(string(ans), "\n")
		n, err := strconv.ParseInt(s, 10, 64)
		if !ok || err != nil || n < 0 {
			return nil, &StatusError{Code: resp.StatusCode, Body: string(ans)}
		}
		return nil, &ConflictError{Size: n}
	case http.StatusUnprocessableEntity:
		return nil, fmt.Errorf("%w: %s", ErrProof, strings.TrimSpace(string(ans)))
	case http.StatusForbidden, http.StatusNotFound:
		return nil, fmt.Errorf("%w (%d): %s", ErrUnknownLog, resp.StatusCode, strings.TrimSpace(string(ans)))
	}
	return nil, &StatusError{Code: resp.StatusCode, Body: string(ans)}
}
