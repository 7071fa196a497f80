package verifier

import (
	"bufio"
	"crypto/ed25519"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/aegis-dev/aegis/schemas"
)

// The parallel walk. Parsing a line and checking its Ed25519 signature are
// most of the cost of a verification and depend on nothing but the line and
// the key it must verify under, so they run on every core, a chunk of lines
// at a time:
//
//  1. read a chunk of lines (sequential, on the caller's goroutine);
//  2. decode, canonicalise and hash each line (parallel);
//  3. decide in record order which key each signed line must verify under:
//     the key published by the last open before it, or for an open its own
//     (sequential, cheap);
//  4. check those signatures and the opens' public keys (parallel);
//  5. walk the chunk in record order with the walker of verifySequential,
//     which takes the results of 2 and 4 instead of computing them.
//
// The walk alone decides the verdict, so it is the one verifySequential
// reaches: the results it takes are the ones it would have computed, and
// where step 3 guessed a key that the walk does not use (only possible once
// the record is already failing) the walk checks the signature itself.
// While the caller walks one chunk, the workers parse and check the next
// ones; at most parallelChunks chunks are read ahead of the walk.

const (
	parallelChunks = 3  // chunks read ahead of the walk
	parseBatch     = 64 // lines per parse job
	checkBatch     = 16 // lines per signature job
)

// parallelConfig sizes the parallel walk; tests shrink the chunks to put
// chunk boundaries everywhere.
type parallelConfig struct {
	workers    int
	chunkLines int // lines per chunk at most
	chunkBytes int // a chunk ends after the line that reaches this size
}

func defaultConfig() parallelConfig {
	return parallelConfig{workers: runtime.GOMAXPROCS(0), chunkLines: 512, chunkBytes: 256 << 10}
}

// prepared is what the workers computed for one line.
type prepared struct {
	line schemas.CanonicalLine
	err  error
	hash string

	// Set by the key pass: the key to check the signature under, and for an
	// open the public key to validate.
	verifyUnder ed25519.PublicKey
	pubHex      string
	pub         ed25519.PublicKey

	// Set by the check pass.
	checkedKey ed25519.PublicKey // the key sigOK was computed under; nil when not checked
	sigOK      bool
	pubChecked bool
	pubOK      bool
}

type chunk struct {
	lines []rawLine
	pre   []prepared
	arena []byte // holds the bytes of most lines
	last  bool   // the record ends with this chunk: its last line is the final line
	err   error  // the read after these lines failed
	keyed bool

	parsed, checked sync.WaitGroup
}

// chunkReader cuts the record into chunks. It reads one line ahead, because
// a line is final only when no line follows it, and when the read after a
// line fails that line is not walked either (as in verifySequential).
type chunkReader struct {
	lr         lineReader
	look       rawLine // the next line, when more
	more       bool
	done       bool
	lines, max int      // per chunk: lines and bytes
	free       []*chunk // walked chunks, for reuse
}

func (cr *chunkReader) start() error {
	l, ok, _, err := cr.lr.read(nil)
	if err != nil {
		return err
	}
	cr.look, cr.more, cr.done = l, ok, !ok
	return nil
}

// recycle takes back a walked chunk. Nothing from a walked chunk outlives
// its walk: decoded lines hold copies of their bytes, and the walker keeps
// only strings it made itself.
func (cr *chunkReader) recycle(c *chunk) {
	clear(c.pre)
	clear(c.lines)
	c.lines, c.pre, c.arena = c.lines[:0], c.pre[:0], c.arena[:0]
	c.last, c.err, c.keyed = false, nil, false
	cr.free = append(cr.free, c)
}

func (cr *chunkReader) next() *chunk {
	var c *chunk
	if n := len(cr.free); n > 0 {
		c, cr.free = cr.free[n-1], cr.free[:n-1]
	} else {
		c = &chunk{arena: make([]byte, 0, cr.max+16<<10)}
	}
	size := 0
	for len(c.lines) < cr.lines && size < cr.max && cr.more {
		l := cr.look
		if len(c.lines) == 0 && len(l.b) <= cap(c.arena) {
			// The line read ahead for the previous chunk sits in that
			// chunk's arena, which is recycled after its walk. (The copy is
			// safe even when c is that chunk: nothing was written to it yet,
			// and append moves overlapping bytes correctly.)
			start := len(c.arena)
			c.arena = append(c.arena, l.b...)
			l.b = c.arena[start:len(c.arena):len(c.arena)]
		}
		c.lines = append(c.lines, l)
		size += len(l.b)
		var err error
		cr.look, cr.more, c.arena, err = cr.lr.read(c.arena)
		if err != nil {
			c.lines = c.lines[:len(c.lines)-1]
			c.err = err
			cr.more, cr.done = false, true
			break
		}
	}
	if !cr.more && c.err == nil {
		c.last, cr.done = true, true
	}
	if cap(c.pre) < len(c.lines) {
		c.pre = make([]prepared, len(c.lines))
	}
	c.pre = c.pre[:len(c.lines)]
	return c
}

type job struct {
	c      *chunk
	lo, hi int
	check  bool
}

// pool runs parse and check jobs on n goroutines.
type pool struct {
	jobs chan job
	stop atomic.Bool // set when the walk is over: skip what is left
	wg   sync.WaitGroup
}

func newPool(n int) *pool {
	p := &pool{jobs: make(chan job, 256)}
	p.wg.Add(n)
	for range n {
		go p.run()
	}
	return p
}

func (p *pool) run() {
	defer p.wg.Done()
	var scratch []byte
	var keys keyCache // a worker's lines mostly share one key
	for j := range p.jobs {
		if j.check {
			if !p.stop.Load() {
				scratch = checkLines(j.c.pre[j.lo:j.hi], scratch, &keys)
			}
			j.c.checked.Done()
		} else {
			if !p.stop.Load() {
				parseLines(j.c.lines[j.lo:j.hi], j.c.pre[j.lo:j.hi])
			}
			j.c.parsed.Done()
		}
	}
}

// submit queues c's lines in batches of batch as parse or check jobs.
func (p *pool) submit(c *chunk, check bool, batch int) {
	wg := &c.parsed
	if check {
		wg = &c.checked
	}
	for lo := 0; lo < len(c.lines); lo += batch {
		hi := min(lo+batch, len(c.lines))
		wg.Add(1)
		p.jobs <- job{c: c, lo: lo, hi: hi, check: check}
	}
}

// close stops the workers and waits for them; jobs still queued are
// dropped.
func (p *pool) close() {
	p.stop.Store(true)
	close(p.jobs)
	p.wg.Wait()
}

func parseLines(lines []rawLine, pre []prepared) {
	for i := range lines {
		if lines[i].tooLong {
			continue
		}
		p := &pre[i]
		if p.line, p.err = schemas.DecodeCanonicalLine(lines[i].b); p.err == nil {
			p.hash = p.line.Hash()
		}
	}
}

// checkLines checks the signatures and keys the key pass asked for, each
// key parsed through keys; scratch is reused for the signing inputs and
// returned.
func checkLines(pre []prepared, scratch []byte, keys *keyCache) []byte {
	for i := range pre {
		p := &pre[i]
		if p.pub != nil {
			_, p.pubOK = keys.get(p.pub)
			p.pubChecked = true
		}
		if p.verifyUnder == nil {
			continue
		}
		// schemas.ParseSignature, without its allocation and its branch on
		// every character.
		sigHex, _ := p.line.Str(schemas.FieldSignature)
		var sig [ed25519.SignatureSize]byte
		if !schemas.DecodeLowerHex(sig[:], sigHex) {
			continue
		}
		msg, err := p.line.AppendSigningInput(scratch[:0])
		if err != nil {
			continue
		}
		scratch = msg
		p.sigOK, p.checkedKey = verifyStrict(keys, p.verifyUnder, msg, sig[:]), p.verifyUnder
	}
	if cap(scratch) > 1<<20 {
		return nil
	}
	return scratch
}

// keyPass is step 3: it follows the opens in record order and picks the key
// each signed line will be checked under by the walk.
type keyPass struct {
	pub   ed25519.PublicKey // published by the last open, nil if unusable
	keyID string
}

func (k *keyPass) assign(c *chunk) {
	for i := range c.pre {
		p := &c.pre[i]
		if c.lines[i].tooLong || p.err != nil {
			continue
		}
		l := &p.line
		switch l.Type() {
		case schemas.LineIntent:
			continue // never verified
		case schemas.LineOpen:
			k.pub, k.keyID = nil, ""
			pubHex, ok := l.Str(schemas.FieldPublicKey)
			if !ok {
				continue
			}
			pub, err := schemas.ParsePublicKey(pubHex)
			if err != nil {
				continue
			}
			k.pub, k.keyID = pub, schemas.KeyID(pub)
			p.pub, p.pubHex = pub, pubHex
		}
		if k.pub == nil {
			continue
		}
		if id, _ := l.Str(schemas.FieldKeyID); id != k.keyID {
			continue // the walk refuses the line before any signature check
		}
		if _, ok := l.Str(schemas.FieldSignature); ok {
			p.verifyUnder = k.pub
		}
	}
	c.keyed = true
}

// verifyParallel is Verify, sized by cfg.
func verifyParallel(r io.Reader, opts Options, cfg parallelConfig) Result {
	w := newWalker(opts)
	if err := w.walkParallel(r, cfg, &fileWalk{final: true, keys: &keyPass{}}); err != nil {
		return Result{Err: fmt.Errorf("read record: %w", err)}
	}
	return w.finish()
}

// fileWalk is one record file of a walk: how to walk it, and what the walk
// found out about its bytes.
type fileWalk struct {
	// final: the file's last line is the record's final line (a single
	// record, or the last file of a rotated set).
	final bool
	// keys carries the key pass from one file of a set to the next.
	keys *keyPass
	// tree, when not nil, gets every line of the file as a leaf.
	tree *leafTree

	// Set by the walk when it reached the end of the file.
	tail  string // HashHex of the last line's bytes, "" for an empty file
	noNL  bool   // the last line does not end in '\n'
	lines int    // lines in the file, empty ones included
}

// walkParallel walks the record in r; it returns the read error that ends
// the walk, if any.
func (w *walker) walkParallel(r io.Reader, cfg parallelConfig, fw *fileWalk) error {
	cr := chunkReader{
		lr:    lineReader{br: bufio.NewReaderSize(r, 64<<10), tree: fw.tree},
		lines: max(cfg.chunkLines, 1),
		max:   max(cfg.chunkBytes, 1),
	}
	if err := cr.start(); err != nil {
		return err
	}
	p := newPool(max(cfg.workers, 1))
	defer p.close()

	var (
		queue []*chunk // read and not yet walked, in record order
		keys  = fw.keys
	)
	key := func(c *chunk) {
		if !c.keyed {
			c.parsed.Wait()
			keys.assign(c)
			p.submit(c, true, checkBatch)
		}
	}
	for {
		for len(queue) < parallelChunks && !cr.done {
			c := cr.next()
			p.submit(c, false, parseBatch)
			queue = append(queue, c)
		}
		if len(queue) == 0 {
			fw.noNL, fw.lines = cr.lr.noNL, cr.lr.no
			return nil
		}
		head := queue[0]
		key(head)
		if len(queue) > 1 {
			// Queue the next chunk's signatures before waiting, so that the
			// workers stay busy while this goroutine walks.
			key(queue[1])
		}
		head.checked.Wait()
		for i := range head.lines {
			last := head.last && i == len(head.lines)-1
			w.line(&head.lines[i], fw.final && last, &head.pre[i])
			if last && fw.tree != nil && !head.lines[i].tooLong {
				fw.tail = schemas.HashHex(head.lines[i].b)
			}
			if w.tampered != nil {
				break
			}
		}
		w.cur = nil
		queue[0] = nil
		queue = queue[1:]
		if w.tampered != nil {
			return nil
		}
		if head.err != nil {
			return head.err
		}
		cr.recycle(head)
	}
}
