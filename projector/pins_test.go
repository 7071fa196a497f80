package projector_test

import (
	"context"
	"testing"

	"github.com/aegis-dev/aegis/projector"
	"github.com/aegis-dev/aegis/schemas"
)

// Pins are a fold of tool.pinned and pins.reset; the index keeps them in
// its snapshot, so a start that loads it reads none of the events again,
// and gets what the whole fold gets.
func TestPinsFoldIntoTheIndexSnapshot(t *testing.T) {
	ctx := context.Background()
	st, _ := tempStore(t)
	sess, err := st.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	add := func(kind schemas.Kind, payload any) {
		t.Helper()
		ev, err := st.NewEvent(sess, kind, payload)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	add(schemas.KindToolPinned, schemas.ToolPinned{Server: "srv a", Tool: "fetch", Digest: "d1", Reason: "first sight"})
	add(schemas.KindToolPinned, schemas.ToolPinned{Server: "srv a", Tool: "echo", Digest: "d2", Reason: "first sight"})
	add(schemas.KindToolPinned, schemas.ToolPinned{Server: "b", Tool: "x", Digest: "d3", Reason: "first sight"})
	// A change alone moves no pin; an approval does.
	add(schemas.KindToolChanged, schemas.ToolChanged{Server: "srv a", Tool: "fetch", Change: "changed", Pinned: "d1", Digest: "d4"})
	add(schemas.KindToolPinned, schemas.ToolPinned{Server: "srv a", Tool: "fetch", Digest: "d4", Reason: "approved apr-pin-fetch-1"})

	ix, _ := loadIndex(t, st)
	if err := ix.Save(ctx, st); err != nil {
		t.Fatal(err)
	}
	pins := ix.ServerPins("srv a")
	if len(pins) != 2 || pins["fetch"].Digest != "d4" || pins["fetch"].Session != sess || pins["echo"].Digest != "d2" {
		t.Fatalf("pins of srv a: %+v", pins)
	}

	add(schemas.KindPinsReset, schemas.PinsReset{Server: "srv a", Tool: "fetch"})
	add(schemas.KindPinsReset, schemas.PinsReset{Server: "b"})
	again, n := loadIndex(t, st)
	if n != 2 {
		t.Fatalf("loading the index folded %d events, want the 2 after its snapshot", n)
	}
	whole, _ := wholeFold(t, st)
	for _, ix := range []*projector.Index{again, whole} {
		got := ix.Pins("")
		if len(got) != 1 || got[0].Server != "srv a" || got[0].Tool != "echo" || got[0].Digest != "d2" {
			t.Fatalf("pins after the resets: %+v", got)
		}
	}
}
