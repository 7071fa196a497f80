package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// treeHelper is the server of TestWindowsTreeKillEndsItsChildren when
// AEGIS_TREE_HELPER says which part to play: "parent" starts a child and
// waits, "child" appends to AEGIS_TREE_OUT every 20 ms until it is ended.
func TestWindowsTreeHelper(t *testing.T) {
	switch os.Getenv("AEGIS_TREE_HELPER") {
	case "":
		t.Skip("the server of TestWindowsTreeKillEndsItsChildren")
	case "parent":
		c := exec.Command(os.Args[0], "-test.run=^TestWindowsTreeHelper$")
		c.Env = append(os.Environ(), "AEGIS_TREE_HELPER=child")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
	case "child":
		for {
			f, err := os.OpenFile(os.Getenv("AEGIS_TREE_OUT"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
			if err == nil {
				f.WriteString("x")
				f.Close()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// A server that starts a process of its own does not leave it running
// when aegis ends the server: the job object ends them together.
func TestWindowsTreeKillEndsItsChildren(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	c := exec.Command(os.Args[0], "-test.run=^TestWindowsTreeHelper$")
	c.Env = append(os.Environ(), "AEGIS_TREE_HELPER=parent", "AEGIS_TREE_OUT="+out)
	tree, err := StartTree(c)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if fi, err := os.Stat(out); err == nil && fi.Size() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child never wrote")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := tree.Kill(); err != nil {
		t.Fatal(err)
	}
	tree.Wait()
	time.Sleep(200 * time.Millisecond)
	fi, _ := os.Stat(out)
	time.Sleep(500 * time.Millisecond)
	if fi2, _ := os.Stat(out); fi2.Size() != fi.Size() {
		t.Fatalf("the child still runs after Kill: %d then %d bytes", fi.Size(), fi2.Size())
	}
	if err := tree.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
}
