package relay

import (
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
)

// TestCommandTable checks that every row of the table is complete (a
// description, a summary, an arguments schema and a result schema that
// compile) and that no schema file is left without a row.
func TestCommandTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Commands() {
		if seen[c.Name] {
			t.Errorf("%s: two rows", c.Name)
		}
		seen[c.Name] = true
		if c.Description == "" || c.Summary == nil {
			t.Errorf("%s: no description or summary", c.Name)
		}
		if c.ReadOnly && (c.Proposal || c.Destructive) {
			t.Errorf("%s: a read cannot create a proposal or destroy", c.Name)
		}
		for _, get := range []func(string) ([]byte, bool){SchemaJSON, ResultSchemaJSON} {
			b, ok := get(c.Name)
			var doc map[string]any
			if !ok || json.Unmarshal(b, &doc) != nil || doc["type"] != "object" {
				t.Errorf("%s: schema missing or not an object schema", c.Name)
			}
		}
		if s, ok := Spec(c.Name); !ok || s.Name != c.Name {
			t.Errorf("Spec(%s) = %+v %v", c.Name, s, ok)
		}
	}
	_ = compiled() // panics on a schema that does not compile
	files, err := fs.Glob(schemaFS, "schemas/*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(f, "schemas/"), ".json"), ".result")
		if !seen[name] {
			t.Errorf("%s has no row in the command table", f)
		}
	}
	if len(files) != 2*len(Commands()) {
		t.Errorf("%d schema files for %d commands", len(files), len(Commands()))
	}
	if ProposalCommand(CmdReadRoom) || !ProposalCommand(CmdProposeRoomRepoApp) || ReadOnlyCommand(CmdSmokeRunRoomApp) || !ReadOnlyCommand(CmdListRoomApps) {
		t.Error("the flags do not read the table")
	}
}

func TestValidateResult(t *testing.T) {
	good := `{"id":"r","name":"n","project":"p","kind":"local","app_count":1,"pending_proposals":0,"later":"a field added later"}`
	if err := ValidateResult(CmdReadRoom, []byte(good)); err != nil {
		t.Errorf("a good result: %v", err)
	}
	for _, c := range []struct{ result, want string }{
		{`{"id":"r","name":"n","project":"p","kind":"local","app_count":-1,"pending_proposals":0}`, "-1 is less than the minimum of 0 (app_count)"},
		{`{"id":"r"}`, "missing properties"},
		{`[]`, "an array is not of type object"},
	} {
		err := ValidateResult(CmdReadRoom, []byte(c.result))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.result, err, c.want)
		}
	}
	if err := ValidateResult("rm_rf", []byte(`{}`)); err == nil {
		t.Error("an unknown command's result passed")
	}
}
