package policy

import (
	"go.yaml.in/yaml/v3"

	"github.com/aegis-dev/aegis/schemas"
)

// witnesses reads the witnesses: key of a policy file: the witness
// policy (schemas.ParseWitnessPolicy, the Sigsum format) as one string,
// a YAML block scalar of witness, group and quorum lines. The anchor
// log's checkpoints go to the witnesses that have a URL; aegis verify
// --witness-policy reads the same lines from a file.
func (p *parser) witnesses(n *yaml.Node, path string) (*schemas.WitnessPolicy, error) {
	s, err := p.str(n, path)
	if err != nil {
		return nil, err
	}
	wp, err := schemas.ParseWitnessPolicy([]byte(s))
	if err != nil {
		// Its line numbers count from the block's first line.
		return nil, p.errorf(n.Line, path, "%v (lines counted from the block's first)", err)
	}
	return wp, nil
}

// Witnesses returns the witness policy of the file's witnesses: key, nil
// when it has none.
func (s *Set) Witnesses() *schemas.WitnessPolicy { return s.witnesses }

// Witnesses returns the witness policy of the gateway config's
// witnesses: key, nil when it has none.
func (g *Gateway) Witnesses() *schemas.WitnessPolicy { return g.rules.witnesses }
