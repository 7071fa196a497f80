package console

import (
	"regexp"
	"testing"
	"time"
)

// A user who reads a time in the console reads it in UTC, with the zone
// written, whatever the zone of the machine or of the browser: a time
// of another zone is written in UTC.
func TestFormatTimeIsUTC(t *testing.T) {
	kolkata := time.FixedZone("IST", 5*3600+1800)
	at := time.Date(2026, 12, 6, 8, 15, 7, 900_000_000, kolkata)
	if got, want := FormatTime(at), "2026-12-06 02:45:07 UTC"; got != want {
		t.Fatalf("FormatTime(%v) = %q; want %q", at, got, want)
	}
	back, err := time.Parse(TimeLayout, FormatTime(at))
	if err != nil || !back.Equal(at.Truncate(time.Second)) {
		t.Fatalf("%q reads back as %v, %v; want %v", FormatTime(at), back, err, at.Truncate(time.Second))
	}
}

// The page writes every time through one function, utc: nothing in its
// script reads a time in the browser's zone (toLocaleString, getHours,
// and the like), as the Requested of an approval once did.
func TestPageWritesNoLocalTime(t *testing.T) {
	js, err := assets.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	local := regexp.MustCompile(`toLocale\w*|\.get(FullYear|Month|Date|Day|Hours|Minutes|Seconds)\(|getTimezoneOffset|Intl\.DateTimeFormat|toTimeString|toDateString`)
	if m := local.FindAll(js, -1); len(m) > 0 {
		t.Fatalf("app.js reads times in the browser's zone: %q; write them with utc()", m)
	}
	if !regexp.MustCompile(`toISOString\(\)\.slice\(0, 19\)\.replace\("T", " "\) \+ " UTC"`).Match(js) {
		t.Fatal("app.js's utc() no longer writes console.TimeLayout (2006-01-02 15:04:05 UTC)")
	}
}
