package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

const consolePolicy = `version: 1
rules:
  - id: gate-add
    action: pending_approval
    tool: add
`

// consoleProc is a running aegis console binary.
type consoleProc struct {
	login string // the login link it printed
	host  string // host:port
}

// console starts aegis console on the live state and runtime directories
// and reads its login link.
func (l *live) console(extra ...string) *consoleProc {
	l.t.Helper()
	args := append([]string{"console", "--state-dir", l.state}, extra...)
	if len(extra) > 0 && extra[0] == "--hub" { // a fleet's console, of no state directory
		args = append([]string{"console"}, extra...)
	}
	c := exec.Command(filepath.Join(l.bin, "aegis"), args...)
	c.Env = l.env
	var errb syncBuffer
	c.Stderr = &errb
	out, err := c.StdoutPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		l.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	l.t.Cleanup(func() {
		c.Process.Kill()
		<-done
		if l.t.Failed() {
			l.t.Logf("aegis console stderr:\n%s", errb.String())
		}
	})
	links := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "http://") {
				links <- sc.Text()
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case link := <-links:
		u, err := url.Parse(link)
		if err != nil {
			l.t.Fatal(err)
		}
		return &consoleProc{login: link, host: u.Host}
	case <-done:
		l.t.Fatalf("aegis console exited:\n%s", errb.String())
	case <-time.After(20 * time.Second):
		l.t.Fatalf("aegis console printed no login link:\n%s", errb.String())
	}
	return nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// browserPath finds Debian's chromium. make test (console-deps) installs
// it and sets AEGIS_REQUIRE_BROWSER, so that there the test never skips.
func browserPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("AEGIS_REQUIRE_BROWSER") != "" {
		t.Fatal("no chromium on PATH: run make console-deps (apt-get install -y chromium)")
	}
	t.Skip("chromium is not installed (make console-deps installs it)")
	return ""
}

// A human at a real browser sees a pending approval appear in the console
// without reloading, approves it with the button, and the host's retried
// call then runs. The page loads nothing but the console's own URLs.
func TestConsoleBrowserApprovesPendingCall(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	chromium := browserPath(t)
	start := time.Now()
	l := newLive(t, consolePolicy)
	// What a real set-up shows: a state directory deep in a home (the
	// notes and the record's path name it), and a server launched through
	// env with its settings, a command of some 400 characters.
	home := filepath.Join(l.dir, "home", "alice-example")
	l.state = filepath.Join(home, ".local", "state", "aegis", "modelcontextprotocol-server-filesystem-projects-acme-platform-monorepo")
	l.audit = filepath.Join(home, ".local", "share", "aegis", "records", "modelcontextprotocol-server-filesystem.aarl")
	if err := os.MkdirAll(filepath.Dir(l.audit), 0o700); err != nil {
		t.Fatal(err)
	}
	if len(l.state) < 120 {
		t.Fatalf("state directory %s: want a path of 120 characters or more", l.state)
	}
	env, err := exec.LookPath("env")
	if err != nil {
		t.Fatal(err)
	}
	projects := filepath.Join(home, "projects")
	argv := []string{env,
		"MCP_FILESYSTEM_ROOTS=" + strings.Join([]string{filepath.Join(projects, "acme-platform-monorepo"), filepath.Join(projects, "acme-platform-docs"), filepath.Join(projects, "acme-infrastructure-terraform")}, ":"),
		"NODE_OPTIONS=--max-old-space-size=4096 --enable-source-maps",
		filepath.Join(l.bin, "aegis-example-server"), "-calls", filepath.Join(home, ".cache", "aegis-example-server", "calls-received-by-the-example-server.log")}
	if err := os.MkdirAll(filepath.Dir(argv[len(argv)-1]), 0o700); err != nil {
		t.Fatal(err)
	}
	command := projector.QuoteArgv(argv)
	if len(command) < 300 {
		t.Fatalf("command %s: want 300 characters or more", command)
	}
	w := l.wrapArgv(argv...)
	w.initialize()
	con := l.console()

	ctx := headless(t, chromium)
	// The browser's clock is in a zone other than UTC: the page shows UTC
	// all the same.
	if _, err := chromedp.Call(ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Kolkata"}); err != nil {
		t.Fatalf("set the browser's time zone: %v", err)
	}

	// Every request the page makes, from the first navigation on.
	var mu sync.Mutex
	var requested []string
	reqs := chromedp.Events(ctx, network.RequestWillBeSent)
	go func() {
		for ev, err := range reqs {
			if err != nil {
				return
			}
			mu.Lock()
			requested = append(requested, ev.Request.URL)
			mu.Unlock()
		}
	}()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800),
		chromedp.Navigate(con.login),
		chromedp.WaitVisible(chromedp.CSS("#sessions")),
		waitJS(`document.querySelector("#live").textContent === "live"`),
		// The running session is listed (from the index its process keeps).
		waitJS(`document.querySelectorAll("#sessions tbody tr").length >= 1`),
		// A mark that a reload would lose.
		void(chromedp.Evaluate[int](`window.aegisMark = 42`)),
	); err != nil {
		t.Fatalf("open the console: %v", err)
	}
	// The user allows notifications; the page's own Notification is
	// watched (and still shows them).
	if _, err := chromedp.CallBrowser(ctx, browser.SetPermission, browser.SetPermissionParams{
		Permission: &browser.PermissionDescriptor{Name: "notifications"}, Setting: browser.PermissionSettingGranted, Origin: "http://" + con.host,
	}); err != nil {
		t.Fatalf("allow notifications: %v", err)
	}
	if err := chromedp.Do(ctx, void(chromedp.Evaluate[bool](`(() => {
		window.aegisNotes = [];
		const N = window.Notification;
		window.Notification = class extends N {
			constructor(title, opts) { window.aegisNotes.push(title + "|" + (opts && opts.body)); super(title, opts); }
		};
		return Notification.permission === "granted";
	})()`))); err != nil {
		t.Fatalf("watch notifications: %v", err)
	}
	loggedIn := time.Since(start)

	// The host's call waits for approval; the page shows it by itself.
	if a := w.call(1, "tools/call", `{"name":"add","arguments":{"a":2,"b":3}}`); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("add: %s", a)
	}
	id := w.approvalID()
	asked := time.Now()
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS("#approvals .approval")),
		waitJS(`document.title === "(1) aegis console"`),
		waitJS(`window.aegisNotes.length === 1 && window.aegisNotes[0] === "aegis: approval needed|add"`),
	); err != nil {
		t.Fatalf("the pending approval did not appear, or no notification was raised: %v", err)
	}
	appeared := time.Since(asked)
	text := func(sel string) string {
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	shownID, tool, args, rule := text("#approvals .approval .id"), text("#approvals .approval .tool"), text("#approvals .approval .args"), text("#approvals .approval .rule")
	if shownID != id || tool != "add" || !strings.Contains(args, `"a": 2`) || rule != "gate-add" {
		t.Fatalf("approval shown as id %q tool %q args %q rule %q; want %q, add, the pretty arguments, gate-add", shownID, tool, args, rule, id)
	}

	// The session's transcript, followed live, for the screenshots.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#sessions tbody tr a.sid")),
		waitJS(`document.querySelector("#transcript").textContent.includes("approval")`),
		// The record, checked while its session runs: no close yet.
		waitJS(`document.querySelector("#records tbody tr .badge.v-indeterminate") !== null`),
	); err != nil {
		t.Fatalf("transcript, or the record's status: %v", err)
	}
	checkLayout(t, ctx, command)
	checkTimes(t, ctx, asked)
	shots(t, ctx)

	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#approvals .approval button.approve")),
		waitJS(`document.querySelectorAll("#approvals .approval").length === 0`),
		waitJS(`document.title === "aegis console"`),
	); err != nil {
		t.Fatalf("approve: %v", err)
	}
	if mark, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.aegisMark || 0`)); err != nil || mark != 42 {
		t.Fatalf("the page was reloaded (mark %d, %v)", mark, err)
	}
	if a := w.call(2, "tools/call", `{"name":"add","arguments":{"a":2,"b":3}}`); !strings.Contains(a, `"sum":5`) {
		t.Fatalf("approved add: %s", a)
	}
	w.finish()

	mu.Lock()
	defer mu.Unlock()
	for _, u := range requested {
		if !strings.HasPrefix(u, "http://"+con.host+"/") {
			t.Errorf("the page requested %s, off the console", u)
		}
	}
	t.Logf("logged in and listed after %v; approval shown %v after the call; %d requests, all to the console", loggedIn.Round(time.Millisecond), appeared.Round(time.Millisecond), len(requested))
}

// wrapArgv runs aegis wrap under the live policy in front of argv.
func (l *live) wrapArgv(argv ...string) *wrapProc {
	l.t.Helper()
	args := append([]string{"wrap", "--audit", l.audit, "--signing-key", l.key, "--state-dir", l.state, "--policy", l.policy, "--"}, argv...)
	return l.start(exec.Command(filepath.Join(l.bin, "aegis"), args...))
}

// checkLayout measures the page at a phone's width (390×844) and at
// 1280×800. At neither does the page scroll sideways: a long path, id or
// command wraps, or scrolls inside its own box (the transcript). At both
// the session's long command takes two lines at most, and the whole of
// it is there: the cell's text and title, and the transcript's heading.
// At 1280 px the sessions table fits its box and leaves the command
// column 300 px or more.
func checkLayout(t *testing.T, ctx context.Context, command string) {
	t.Helper()
	type measure struct {
		Page, Inner int      // the page's scroll width, its width
		Out         []string // what sticks out of the page, outside a scrolling box
		Box, BoxIn  int      // the sessions table's box: scroll width, width
		CellW       float64  // the command cell's width
		CellH, Line float64  // the command cell's height, its line height
		Title, Text string   // the command cell's title and text
		Full        string   // the command the transcript's heading shows
	}
	const js = `(() => {
		const de = document.documentElement;
		const out = [];
		// Inside a box that scrolls (or clips) its own overflow.
		const boxed = (e) => {
			for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
				if (getComputedStyle(a).overflowX !== "visible") return true;
			}
			return false;
		};
		const name = (e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className ? "." + e.className : "");
		for (const e of document.body.querySelectorAll("*")) {
			const r = e.getBoundingClientRect();
			if (r.width > 0 && r.right > de.clientWidth + 0.5 && !boxed(e)) out.push(name(e) + " to " + Math.round(r.right) + "px");
		}
		// Text that runs out of its box, as a path that does not wrap.
		const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
		for (let n = walk.nextNode(); n; n = walk.nextNode()) {
			if (boxed(n)) continue;
			const range = document.createRange();
			range.selectNodeContents(n);
			const r = range.getBoundingClientRect();
			if (r.width > 0 && r.right > de.clientWidth + 0.5) out.push("the text " + JSON.stringify(n.nodeValue.slice(0, 40)) + " of " + name(n.parentElement) + " to " + Math.round(r.right) + "px");
		}
		const box = document.querySelector("#sessions").closest(".scroll");
		const td = document.querySelector("#sessions tbody tr td.cmd");
		const full = document.querySelector("#transcript-command");
		return { Page: de.scrollWidth, Inner: de.clientWidth, Out: out.slice(0, 10),
			Box: box.scrollWidth, BoxIn: box.clientWidth,
			CellW: td.getBoundingClientRect().width, CellH: td.getBoundingClientRect().height, Line: parseFloat(getComputedStyle(td).lineHeight),
			Title: td.title, Text: td.textContent, Full: full ? full.textContent : "" };
	})()`
	for _, size := range []struct{ w, h int64 }{{390, 844}, {1280, 800}} {
		var m measure
		err := chromedp.Do(ctx, chromedp.EmulateViewport(size.w, size.h), chromedp.Sleep(200*time.Millisecond),
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				var err error
				m, err = chromedp.Evaluate[measure](js)(ctx, tg)
				return err
			}))
		if err != nil {
			t.Fatalf("measure the page at %dx%d: %v", size.w, size.h, err)
		}
		t.Logf("at %dx%d: page %d in %d; sessions table %d in %d; command cell %.0f×%.0f px (line %.1f px)", size.w, size.h, m.Page, m.Inner, m.Box, m.BoxIn, m.CellW, m.CellH, m.Line)
		if m.Page > m.Inner || len(m.Out) > 0 {
			t.Errorf("at %dx%d the page is %d px wide in a window of %d: it scrolls sideways; sticking out: %v", size.w, size.h, m.Page, m.Inner, m.Out)
		}
		if m.Title != command || m.Text != command || m.Full != command {
			t.Errorf("at %dx%d the command is not there whole:\ncell title %q\ncell text  %q\ntranscript %q\nwant       %q", size.w, size.h, m.Title, m.Text, m.Full, command)
		}
		if m.CellH > 3*m.Line {
			t.Errorf("at %dx%d the command makes its row %.0f px high, more than two lines of %.1f px", size.w, size.h, m.CellH, m.Line)
		}
		if size.w == 1280 && (m.Box > m.BoxIn || m.CellW < 300) {
			t.Errorf("at 1280 px the sessions table is %d px wide in a box of %d, its command column %.0f px: want it whole in its box, the command 300 px wide or more", m.Box, m.BoxIn, m.CellW)
		}
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatal(err)
	}
}

// consoleTime is the one form of every time the console shows.
var (
	consoleTime = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC\b`)
	timeLike    = regexp.MustCompile(`\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2}|\d{1,2}/\d{1,2}/\d{2,4}|\b[AP]M\b`)
)

// timesIn returns the times that text shows in the console's one form,
// and any other time-like text (another zone, another form).
func timesIn(text string) (times, others []string) {
	return consoleTime.FindAllString(text, -1), timeLike.FindAllString(consoleTime.ReplaceAllString(text, ""), -1)
}

// checkTimes reads every text of the page but the transcript (the lines
// of aegis replay, in RFC 3339 UTC): each time in it is in one form, in
// UTC, whatever the browser's zone; the approval's Requested is the
// moment it was asked.
func checkTimes(t *testing.T, ctx context.Context, asked time.Time) {
	t.Helper()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("header, main > section:not([hidden]):not(#transcript-section), #transcript-section > :not(#transcript)")].map((e) => e.innerText).join("\n")`))
	if err != nil {
		t.Fatalf("read the page's text: %v", err)
	}
	times, others := timesIn(text)
	// Started, Ended, Requested, when the record was checked.
	if len(times) < 4 || len(others) > 0 {
		t.Errorf("the page shows %d times in the form 2006-01-02 15:04:05 UTC (want 4 or more) and these in another form: %q\n%s", len(times), others, text)
	}
	requested, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#approvals .approval .requested")))
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse("2006-01-02 15:04:05 MST", requested)
	if err != nil || at.Location() != time.UTC || at.Sub(asked).Abs() > time.Minute {
		t.Errorf("Requested %q (%v, %v): want the moment the call was held, %s", requested, at, err, asked.UTC().Format("2006-01-02 15:04:05 MST"))
	}
}

// void drops an action's value.
func void[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}

// waitJS waits until a JavaScript expression is true.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	return void(chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
}

// shots takes the screenshots at 1280×800 and at a narrow width. With
// -update they go to docs/ (the README shows them), else to a temporary
// folder; either way they must decode at those sizes.
func shots(t *testing.T, ctx context.Context) {
	dir := t.TempDir()
	if *updateGolden {
		dir = filepath.Join("..", "..", "docs")
	}
	for _, s := range []struct {
		name string
		w, h int64
	}{{"console-1280.png", 1280, 800}, {"console-narrow.png", 390, 844}} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(s.w, s.h), chromedp.Sleep(300*time.Millisecond)); err != nil {
			t.Fatalf("screenshot %s: %v", s.name, err)
		}
		b, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot %s: %v", s.name, err)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(b))
		if err != nil || int64(cfg.Width) != s.w || int64(cfg.Height) != s.h {
			t.Fatalf("screenshot %s: %dx%d, %v; want %dx%d", s.name, cfg.Width, cfg.Height, err, s.w, s.h)
		}
		if err := os.WriteFile(filepath.Join(dir, s.name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatal(err)
	}
}

// Each request an attacker can make to the console is refused with a
// clear body: a page of another site (no cookie, or a foreign Origin), a
// DNS-rebinding page (a foreign Host), another local user or process that
// read the login link after it was used, or one that guesses a cookie.
func TestConsoleRefusesAttacks(t *testing.T) {
	l := newLive(t, "")
	con := l.console()
	plain := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 10 * time.Second}

	// The user logs in once.
	resp, err := plain.Get(con.login)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "aegis_console" {
			cookie = c
		}
	}
	if resp.StatusCode != 200 || cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("login: %d, cookie %+v; want 200 and an HttpOnly, SameSite=Strict cookie", resp.StatusCode, cookie)
	}

	base := "http://" + con.host
	decision := `{"op":"approve","session":"01KAQ3T5PS0C6ZJ5X1JQZ4Q1RM","approval_id":"apr-gate-add-1"}`
	for _, tc := range []struct {
		attack       string
		method, path string
		host, origin string
		ctype, body  string
		cookie       string // "" none, "ok" the user's, else this value
		code         int
		says         string
	}{
		{attack: "page of another site reads the state without the cookie", method: "GET", path: "/api/state", code: 401, says: "not logged in"},
		{attack: "page of another site opens the event stream without the cookie", method: "GET", path: "/api/events", code: 401, says: "not logged in"},
		{attack: "approve without the cookie", method: "POST", path: "/api/decide", origin: base, ctype: "application/json", body: decision, code: 401, says: "not logged in"},
		{attack: "guessed session cookie", method: "GET", path: "/", cookie: strings.Repeat("ab", 32), code: 401, says: "not logged in"},
		{attack: "cross-site approve from a foreign Origin", method: "POST", path: "/api/decide", cookie: "ok", origin: "http://evil.example", ctype: "application/json", body: decision, code: 403, says: "Origin"},
		{attack: "cross-site approve from a null Origin", method: "POST", path: "/api/decide", cookie: "ok", origin: "null", ctype: "application/json", body: decision, code: 403, says: "Origin"},
		{attack: "approve without an Origin", method: "POST", path: "/api/decide", cookie: "ok", ctype: "application/json", body: decision, code: 403, says: "Origin"},
		{attack: "cross-site form post", method: "POST", path: "/api/decide", cookie: "ok", origin: base, ctype: "application/x-www-form-urlencoded", body: "op=approve", code: 403, says: "JSON"},
		{attack: "DNS rebinding reads the state", method: "GET", path: "/api/state", cookie: "ok", host: "evil.example:" + portOf(con.host), code: 403, says: "Host"},
		{attack: "DNS rebinding approves", method: "POST", path: "/api/decide", cookie: "ok", host: "evil.example:" + portOf(con.host), origin: "http://evil.example:" + portOf(con.host), ctype: "application/json", body: decision, code: 403, says: "Host"},
		{attack: "DNS rebinding logs in", method: "GET", path: strings.TrimPrefix(con.login, base), host: "evil.example:" + portOf(con.host), code: 403, says: "Host"},
		{attack: "replayed login link", method: "GET", path: strings.TrimPrefix(con.login, base), code: 403, says: "used already"},
		{attack: "guessed login token", method: "GET", path: "/login?token=" + strings.Repeat("0", 64), code: 403, says: "not the login link"},
	} {
		t.Run(tc.attack, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			switch tc.cookie {
			case "":
			case "ok":
				req.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value})
			default:
				req.AddCookie(&http.Cookie{Name: cookie.Name, Value: tc.cookie})
			}
			resp, err := plain.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code || !strings.HasPrefix(string(b), "aegis console: ") || !strings.Contains(string(b), tc.says) {
				t.Fatalf("%s %s: %d %q; want %d and a body that says %q", tc.method, tc.path, resp.StatusCode, b, tc.code, tc.says)
			}
		})
	}

	// The same requests with the cookie, the Host and the Origin of the
	// console get through: the decision reaches the approval channel
	// (which has no such session).
	req, _ := http.NewRequest("POST", base+"/api/decide", strings.NewReader(decision))
	req.Header.Set("Origin", base)
	req.Header.Set("Content-Type", "application/json")
	req.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value})
	resp, err = plain.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(b), "no running aegis process serves session") {
		t.Fatalf("the user's own decision: %d %s", resp.StatusCode, b)
	}
	req, _ = http.NewRequest("GET", base+"/api/state", nil)
	req.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value})
	resp, err = plain.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the user's own state: %d", resp.StatusCode)
	}
}

func portOf(hostport string) string {
	return hostport[strings.LastIndexByte(hostport, ':')+1:]
}

// A console off loopback must be asked for, and must name one address;
// a record rechecked more often than every second would have the console
// read the whole record file again and again.
func TestConsoleListenOffLoopback(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, "not a loopback address"},
		{[]string{"--listen", "192.0.2.7:8700"}, "not a loopback address"},
		{[]string{"--listen", "0.0.0.0:0", "--allow-remote"}, "every interface"},
		{[]string{"--listen", ":8700", "--allow-remote"}, "every interface"},
		{[]string{"--listen", "nonsense"}, "HOST:PORT"},
		{[]string{"--recheck-every", "100ms"}, "cannot be asked for more often than every 1s"},
		{[]string{"--recheck-every", "0s"}, "give --recheck-every 1s or more"},
	} {
		code, _, errs := cmd(t, nil, append([]string{"console", "--state-dir", t.TempDir()}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.says) {
			t.Errorf("aegis console %v: exit %d, %s; want 2 and %q", tc.args, code, errs, tc.says)
		}
	}
}

// Deny from the console is the request aegis deny --session sends: the
// process that holds the approval records it with its reason and the
// user who asked, and a second decision on the same id is refused by that
// process, its reason shown.
func TestConsoleDenyIsRecordedAsDeny(t *testing.T) {
	t.Parallel() // it mostly waits on processes: beside the others
	l := newLive(t, consolePolicy)
	w := l.wrap(false)
	w.initialize()
	con := l.console()
	jar := loginClient(t, con)
	if a := w.call(1, "tools/call", `{"name":"add","arguments":{"a":2,"b":3}}`); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("add: %s", a)
	}
	id := w.approvalID()
	var session string
	deadline := time.Now().Add(20 * time.Second)
	for session == "" {
		var st struct {
			Pending []struct {
				Session    string `json:"session"`
				ApprovalID string `json:"approval_id"`
			} `json:"pending"`
		}
		jar.getJSON(t, "/api/state", &st)
		for _, p := range st.Pending {
			if p.ApprovalID == id {
				session = p.Session
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("approval %s never listed: %+v", id, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	body := fmt.Sprintf(`{"op":"deny","session":%q,"approval_id":%q,"reason":"not on production"}`, session, id)
	if code, b := jar.post(t, "/api/decide", body); code != 200 || !strings.Contains(b, id) {
		t.Fatalf("deny: %d %s", code, b)
	}
	if code, b := jar.post(t, "/api/decide", body); code != http.StatusConflict || !strings.Contains(b, "refused to deny "+id) {
		t.Fatalf("second deny: %d %s; want 409 and the process's refusal", code, b)
	}
	w.finish()

	// With the session over and no aegis holding the directory, the list
	// comes from a snapshot of the stream, and the transcript ends.
	for deadline := time.Now().Add(20 * time.Second); ; {
		var st struct {
			Sessions []struct {
				ID, State string
			} `json:"sessions"`
		}
		jar.getJSON(t, "/api/state", &st)
		if len(st.Sessions) == 1 && st.Sessions[0].ID == session && st.Sessions[0].State == "closed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session is not listed as closed: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	req, _ := http.NewRequest("GET", jar.base+"/api/transcript?session="+session, nil)
	if code, b := jar.do(t, req); code != 200 || !strings.Contains(b, id+" denied by tester@") || !strings.HasSuffix(b, "event: end\ndata: \"the session has ended\"\n\n") {
		t.Fatalf("transcript stream: %d\n%s", code, b)
	}

	out, code := l.aegis("replay", "--state-dir", l.state, session)
	if code != 0 || !strings.Contains(out, id+" denied by tester@") || !strings.Contains(out, `"not on production"`) || !strings.Contains(out, "refused: approval "+id+" was already denied") {
		t.Fatalf("replay: exit %d\n%s", code, out)
	}
}

// consoleClient is a logged-in plain HTTP client of a console.
type consoleClient struct {
	base   string
	cookie *http.Cookie
}

func loginClient(t *testing.T, con *consoleProc) *consoleClient {
	t.Helper()
	resp, err := http.Get(con.login)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == "aegis_console" {
			return &consoleClient{base: "http://" + con.host, cookie: c}
		}
	}
	t.Fatalf("login: %d and no cookie", resp.StatusCode)
	return nil
}

func (c *consoleClient) do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	req.AddCookie(&http.Cookie{Name: c.cookie.Name, Value: c.cookie.Value})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (c *consoleClient) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", c.base+path, nil)
	code, b := c.do(t, req)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal([]byte(b), v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

func (c *consoleClient) post(t *testing.T, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", c.base+path, strings.NewReader(body))
	req.Header.Set("Origin", c.base)
	req.Header.Set("Content-Type", "application/json")
	return c.do(t, req)
}

// A process run with --approvers takes only signed approvals: the console
// given an approver key asks its passphrase in the page, refuses a wrong
// one without sending anything, and with the right one signs the
// approval, which lets the host's retried call through once; the decision
// line names the approver's key id.
func TestConsoleSignsApprovalsWithAnApproverKey(t *testing.T) {
	t.Parallel() // it mostly waits on processes, or on CPU in a child: beside the others
	chromium := browserPath(t)
	l := newLive(t, consolePolicy)
	k, keyPath, list := approverFiles(t, l.dir, "alice", "correct horse battery")
	w := l.wrapWithApprovers(list)
	w.initialize()
	con := l.console("--approver-key", keyPath)

	ctx := headless(t, chromium)
	if err := chromedp.Do(ctx, chromedp.Navigate(con.login), chromedp.WaitVisible(chromedp.CSS("#sessions"))); err != nil {
		t.Fatalf("open the console: %v", err)
	}
	if a := w.call(1, "tools/call", `{"name":"add","arguments":{"a":2,"b":3}}`); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("add: %s", a)
	}
	w.approvalID()
	card := "#approvals .approval"
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(card+" .passphrase")),
		// Approve with no passphrase, then a wrong one: refused, and the
		// approval is still there.
		chromedp.Click(chromedp.CSS(card+" button.approve")),
		waitJS(`document.querySelector("#approvals .approval .result").textContent.includes("passphrase")`),
		chromedp.SendKeys(chromedp.CSS(card+" .passphrase"), "not it at all"),
		chromedp.Click(chromedp.CSS(card+" button.approve")),
		waitJS(`document.querySelector("#approvals .approval .result").textContent.includes("not the passphrase")`),
	); err != nil {
		t.Fatalf("a wrong passphrase: %v", err)
	}
	if a := w.call(2, "tools/call", `{"name":"add","arguments":{"a":2,"b":3}}`); !strings.Contains(a, "PENDING_APPROVAL") {
		t.Fatalf("the call got through on a wrong passphrase: %s", a)
	}
	w.approvalID()
	if err := chromedp.Do(ctx,
		waitJS(`document.querySelectorAll("#approvals .approval").length === 2`),
		chromedp.SendKeys(chromedp.CSS(card+" .passphrase"), "correct horse battery"),
		chromedp.Click(chromedp.CSS(card+" button.approve")),
		waitJS(`document.querySelectorAll("#approvals .approval").length === 1`),
	); err != nil {
		t.Fatalf("approve with the passphrase: %v", err)
	}
	if a := w.call(3, "tools/call", `{"name":"add","arguments":{"a":2,"b":3}}`); !strings.Contains(a, `"sum":5`) {
		t.Fatalf("the signed approval did not let the call through: %s", a)
	}
	w.finish()
	if b := readFile(t, l.audit); !bytes.Contains(b, []byte(`"approver_key_id":"`+schemas.KeyID(k.PublicKey())+`"`)) {
		t.Fatal("the decision line does not name the approver's key id")
	}
}

// headless starts chromium headless at 1280×800, where no host name
// resolves (the page must need no network but the console), and returns
// its context, bounded to two minutes; it ends with the test. Its
// TMPDIR is the test's, where chromium leaves its singleton socket.
func headless(t *testing.T, chromium string) context.Context {
	t.Helper()
	// A short TMPDIR: chromium puts its singleton socket there, and a
	// unix socket's path has at most 107 bytes, which a subtest's
	// t.TempDir (named after the test and the subtest) can pass.
	tmp, err := os.MkdirTemp("", "chromium")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.WindowSize(1280, 800),
		chromedp.Env("TMPDIR="+tmp),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"),
		chromedp.Flag("disable-gpu", true))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelB := chromedp.NewContext(actx)
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	t.Cleanup(func() { cancel(); cancelB(); cancelA() })
	// The browser starts here, once: chromedp starts it at a context's
	// first Run (or Do), and a second one after a failed start starts it
	// again and panics (close of closed channel), which ends every test of
	// the package, not this one.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	return ctx
}
