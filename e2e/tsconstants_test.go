package e2e

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/agent/provider"
	"github.com/roomrelay/roomrelay/relay"
)

var updateTSConstants = flag.Bool("update", false, "rewrite testdata/tsclient-constants.golden.json from the Go constants")

// tsConstantsGoldenPath is what clients/ts/test/constants.test.ts reads to
// check the TypeScript client's exported constants against Go's.
var tsConstantsGoldenPath = filepath.Join("testdata", "tsclient-constants.golden.json")

type tsConstants struct {
	Comment    string         `json:"_comment"`
	CloseCodes map[string]int `json:"close_codes"`
	Commands   []struct {
		Code      relay.Code `json:"code"`
		Retryable bool       `json:"retryable"`
	} `json:"command_error_codes"`
	LocalAPI []string `json:"localapi_error_codes"`
}

func buildTSConstants() tsConstants {
	c := tsConstants{
		Comment: "The contract's constants as Go defines them; clients/ts/test/constants.test.ts checks the TypeScript client's against this file. Written by TestTSClientConstantsGolden (go test ./e2e -run TestTSClientConstantsGolden -update).",
		CloseCodes: map[string]int{
			"GOING_AWAY":          websocket.CloseGoingAway,
			"MESSAGE_TOO_BIG":     websocket.CloseMessageTooBig,
			"REPLACED":            provider.CloseReplaced,
			"UNSUPPORTED_VERSION": provider.CloseUnsupported,
			"PROTOCOL_ERROR":      provider.CloseProtocolError,
			"NOT_SELECTED":        provider.CloseNotSelected,
		},
		LocalAPI: []string{localapi.CodeForbidden, localapi.CodeConflict, localapi.CodeHashMismatch, localapi.CodePreconditionFailed,
			localapi.CodeUnsupportedAPIVersion, localapi.CodeTooLarge, localapi.CodeUnavailable, localapi.CodeMethodNotAllowed},
	}
	for _, code := range relay.Codes() {
		c.Commands = append(c.Commands, struct {
			Code      relay.Code `json:"code"`
			Retryable bool       `json:"retryable"`
		}{code, code.Retryable()})
	}
	return c
}

// TestTSClientConstantsGolden keeps testdata/tsclient-constants.golden.json
// equal to the Go constants (close codes, the command error codes and their
// retryability, the local API's codes); the TypeScript suite checks its
// exports against it, so a code changed on one side fails a test.
func TestTSClientConstantsGolden(t *testing.T) {
	want, err := json.MarshalIndent(buildTSConstants(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	if *updateTSConstants {
		if err := os.WriteFile(tsConstantsGoldenPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(tsConstantsGoldenPath)
	if err != nil {
		t.Fatalf("%v (go test ./e2e -run TestTSClientConstantsGolden -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the Go constants: run go test ./e2e -run TestTSClientConstantsGolden -update, then update clients/ts/src/constants.ts to match\nwant:\n%s", tsConstantsGoldenPath, want)
	}
}
