package policy

import (
	"os"
	"strings"
	"testing"
)

// gatewayDoc is the user's description of the gateway file.
const gatewayDoc = "../docs/gateway.md"

// docs/gateway.md stays true to the parser: every key that ParseGateway
// accepts, at every level, is described there (as `key`), and every
// complete file it shows (a yaml block that starts with "version: 1")
// parses.
func TestGatewayDocNamesEveryKey(t *testing.T) {
	b, err := os.ReadFile(gatewayDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, keys := range [][]string{gatewayKeys, serverKeys, envFileKeys, headerSourceKeys, confineKeys, profileKeys, activationKeys, ruleKeys, rateKeys, limitsKeys, oauthKeys} {
		for _, k := range keys {
			if !strings.Contains(doc, "`"+k+"`") && !strings.Contains(doc, "`"+k+":") {
				t.Errorf("%s does not describe the key %q", gatewayDoc, k)
			}
		}
	}
	files := 0
	for i, block := range strings.Split(doc, "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if !strings.HasPrefix(block, "version: 1\n") {
			continue
		}
		files++
		if _, err := ParseGateway("gateway.md", []byte(block)); err != nil {
			t.Errorf("yaml block %d of %s does not parse: %v", i+1, gatewayDoc, err)
		}
	}
	if files == 0 {
		t.Errorf("%s shows no complete file", gatewayDoc)
	}
}
