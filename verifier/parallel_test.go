package verifier

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The parallel walk must give exactly the result of the sequential one:
// verdict, reason, coverage, key_ids, in_flight and warnings, for every
// record, every chunk size and every number of workers.

// testConfigs are the sizes the differential tests run the parallel walk
// with: the default, one worker, and chunks small enough that every line
// and every session boundary falls on a chunk boundary somewhere.
func testConfigs() []parallelConfig {
	return []parallelConfig{
		defaultConfig(),
		{workers: 1, chunkLines: 512, chunkBytes: 256 << 10},
		// Chunks cut by their count of lines; the byte bound still holds a
		// 150 KiB line, and is no larger, since each chunk's arena is
		// cleared at its size on every walk.
		{workers: 3, chunkLines: 1, chunkBytes: 200 << 10},
		{workers: 2, chunkLines: 2, chunkBytes: 200 << 10},
		{workers: 4, chunkLines: 3, chunkBytes: 200 << 10},
		{workers: 2, chunkLines: 512, chunkBytes: 500},
	}
}

func testOptions() []Options {
	return []Options{
		{},
		{Keys: []ed25519.PublicKey{pubOf(devKey())}},
		{TrustStore: &TrustStore{}},
		{TrustStore: &TrustStore{Keys: []ed25519.PublicKey{pubOf(otherKey()), pubOf(devKey())}}},
	}
}

// sameResult compares two results field by field, errors by their text.
func sameResult(a, b Result) error {
	ae, be := fmt.Sprint(a.Err), fmt.Sprint(b.Err)
	a.Err, b.Err = nil, nil
	if ae != be {
		return fmt.Errorf("Err %s != %s", ae, be)
	}
	if !reflect.DeepEqual(a, b) {
		return fmt.Errorf("%s\n%+v\n!=\n%s\n%+v", Render(a), a, Render(b), b)
	}
	return nil
}

// checkParallel verifies record with verifySequential and with the parallel
// walk in every test configuration (or only cfgs when given), under every
// test option (or only the first n).
func checkParallel(t *testing.T, record []byte, nopts int, cfgs ...parallelConfig) {
	t.Helper()
	if len(cfgs) == 0 {
		cfgs = testConfigs()
	}
	for _, opts := range testOptions()[:nopts] {
		want := verifySequential(bytes.NewReader(record), opts)
		for _, cfg := range cfgs {
			got := verifyParallel(bytes.NewReader(record), opts, cfg)
			if err := sameResult(got, want); err != nil {
				t.Fatalf("record %q\nconfig %+v, options %+v:\nparallel %v", record, cfg, opts, err)
			}
		}
	}
}

// diffRecords returns the corpus, the golden session and two generated
// multi-session records.
func diffRecords(t *testing.T) map[string][]byte {
	records := map[string][]byte{}
	files, _ := filepath.Glob(filepath.Join("testdata", "corpus", "*.aarl"))
	files = append(files, filepath.Join("testdata", "upstream-golden-session.aarl"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		records[filepath.Base(name)] = b
	}
	if len(records) < 35 {
		t.Fatalf("found %d records", len(records))
	}
	w := goodSession(newTestWriter(t, devKey()))
	w.key = otherKey()
	w = goodSession(w).open().intent("call-a").outcome("call-a").intent("call-b").decision("apr-1")
	w.key = devKey()
	records["generated_four_sessions"] = goodSession(w).bytes()
	records["generated_long"] = benchRecord(t, 40)
	// Lines longer than the reader's buffer and than a chunk's arena.
	big := strings.Repeat("x", 150<<10)
	records["generated_big_lines"] = newTestWriter(t, devKey()).open().
		intent("call-1", pre(set("blob", big))).outcome("call-1", pre(set("blob", big))).
		intent("call-2").outcome("call-2").close().bytes()
	return records
}

func TestParallelMatchesSequentialOnCorpus(t *testing.T) {
	for name, record := range diffRecords(t) {
		t.Run(name, func(t *testing.T) { checkParallel(t, record, len(testOptions())) })
	}
}

// mutate returns a random variation of record: bit flips, cuts, swapped,
// dropped, repeated or blank lines, CRLF line ends.
func mutate(rng *rand.Rand, record []byte) []byte {
	b := bytes.Clone(record)
	lines := bytes.SplitAfter(b, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	join := func() []byte { return bytes.Join(lines, nil) }
	switch rng.Intn(9) {
	case 0: // flip one bit
		if len(b) > 0 {
			b[rng.Intn(len(b))] ^= 1 << rng.Intn(8)
		}
		return b
	case 1: // flip a bit inside a signature or a hash
		i := bytes.LastIndex(b[:rng.Intn(len(b)+1)], []byte(`":"`))
		if i >= 0 && i+10 < len(b) {
			b[i+3+rng.Intn(7)] ^= 1
		}
		return b
	case 2: // truncate
		return b[:rng.Intn(len(b)+1)]
	case 3: // swap two lines
		if len(lines) > 1 {
			i, j := rng.Intn(len(lines)), rng.Intn(len(lines))
			lines[i], lines[j] = lines[j], lines[i]
		}
		return join()
	case 4: // drop a line
		if len(lines) > 0 {
			i := rng.Intn(len(lines))
			lines = append(lines[:i:i], lines[i+1:]...)
		}
		return join()
	case 5: // repeat a line
		if len(lines) > 0 {
			i := rng.Intn(len(lines))
			lines = append(lines[:i+1:i+1], lines[i:]...)
		}
		return join()
	case 6: // blank lines
		i := rng.Intn(len(lines) + 1)
		lines = append(lines[:i:i], append([][]byte{[]byte("\n\n")}, lines[i:]...)...)
		return join()
	case 7: // CRLF, or whitespace in a line
		if rng.Intn(2) == 0 {
			return bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n"))
		}
		return bytes.Replace(b, []byte(`,"`), []byte(`, "`), 1+rng.Intn(3))
	default: // a byte deleted
		if len(b) > 0 {
			i := rng.Intn(len(b))
			return append(b[:i:i], b[i+1:]...)
		}
		return b
	}
}

func TestParallelMatchesSequentialOnMutations(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	records := diffRecords(t)
	n := 12
	if testing.Short() || raceDetector { // make test runs all 12 without the race detector
		n = 3
	}
	for name, record := range records {
		for i := range n {
			m := record
			for range 1 + rng.Intn(3) {
				m = mutate(rng, m)
			}
			t.Run(fmt.Sprintf("%s/%d", name, i), func(t *testing.T) {
				cfgs := testConfigs()
				checkParallel(t, m, 2, cfgs[0], cfgs[2+rng.Intn(len(cfgs)-2)])
			})
		}
	}
}

// TestParallelReadErrors: a read that fails after any number of bytes
// gives the same result: the failure, or a Tampered reason found before it.
func TestParallelReadErrors(t *testing.T) {
	record := diffRecords(t)["session_boundary_after_close.aarl"]
	bad := diffRecords(t)["chain_broken.aarl"]
	step := 11
	if raceDetector {
		step = 77 // make test runs every 11th without the race detector
	}
	for _, rec := range [][]byte{record, bad} {
		for cut := 0; cut <= len(rec); cut += step {
			for _, cfg := range testConfigs()[1:4] {
				want := verifySequential(&failingReader{after: rec[:cut]}, Options{})
				got := verifyParallel(&failingReader{after: rec[:cut]}, Options{}, cfg)
				if err := sameResult(got, want); err != nil {
					t.Fatalf("cut at %d, config %+v: %v", cut, cfg, err)
				}
			}
		}
	}
}

// TestParallelStopsReadingAtTamper: like the sequential walk, the parallel
// one returns at the first Tampered reason however the rest of the reader
// behaves (here: it would fail).
func TestParallelStopsReadingAtTamper(t *testing.T) {
	record := diffRecords(t)["chain_broken.aarl"]
	r := io.MultiReader(bytes.NewReader(record), &failingReader{})
	res := Verify(r, Options{})
	if res.Err != nil || res.Reason == nil || res.Reason.Code != ChainBroken {
		t.Fatalf("Verify = %+v", res)
	}
}

// TestParallelKeyGuessFallsBack: where the key the workers checked a
// signature under is not the session's, the walk checks it itself.
func TestParallelKeyGuessFallsBack(t *testing.T) {
	w := newTestWriter(t, devKey()).open().intent("call-1").outcome("call-1")
	l := &rawLine{no: 3, b: w.lines[2]}
	pres := []prepared{{}}
	parseLines([]rawLine{*l}, pres)
	pres[0].verifyUnder = pubOf(otherKey())
	checkLines(pres, nil, &keyCache{})
	if pres[0].checkedKey == nil || pres[0].sigOK {
		t.Fatalf("checked under the other key: %+v", pres[0])
	}
	wk := newWalker(Options{})
	for i, b := range w.lines[:2] {
		wk.line(&rawLine{no: i + 1, b: b}, false, nil)
	}
	wk.line(l, false, &pres[0])
	if wk.tampered != nil {
		t.Fatalf("walk with a wrong guess: %v", wk.tampered)
	}
	if wk.inline != 3 { // the open's key, its signature, the outcome's signature
		t.Fatalf("the walk checked %d signatures or keys itself, want 3", wk.inline)
	}
}

// TestParallelChecksAhead: on records that verify, across session
// boundaries and key rotations and with chunk boundaries anywhere, every
// signature and key is checked by the workers, none by the walk.
func TestParallelChecksAhead(t *testing.T) {
	records := diffRecords(t)
	for _, name := range []string{"verified_rotated_keys.aarl", "verified_killed_session_anchored.aarl", "generated_four_sessions", "generated_long", "generated_big_lines", "upstream-golden-session.aarl"} {
		for _, cfg := range testConfigs() {
			w := newWalker(Options{})
			if err := w.walkParallel(bytes.NewReader(records[name]), cfg, &fileWalk{final: true, keys: &keyPass{}}); err != nil {
				t.Fatal(err)
			}
			if res := w.finish(); res.Verdict != Verified {
				t.Fatalf("%s: %s", name, Render(res))
			}
			if w.inline != 0 {
				t.Errorf("%s, config %+v: the walk checked %d signatures or keys itself", name, cfg, w.inline)
			}
		}
	}
}

func FuzzVerifyParallel(f *testing.F) {
	for _, b := range seedRecords(f) {
		f.Add(b, uint8(0))
		f.Add(b, uint8(1))
	}
	f.Fuzz(func(t *testing.T, record []byte, size uint8) {
		cfg := parallelConfig{workers: 2, chunkLines: int(size%5) + 1, chunkBytes: 1 << 20}
		if size >= 128 {
			cfg = defaultConfig()
		}
		checkParallel(t, record, 2, cfg)
	})
}
